// known_hosts matching: plain, [host]:port, patterns, hashed |1| entries (made by the
// real ssh-keygen -H), mismatches with their line, @revoked, appending, and files that
// another user could change refused.
#include <catch2/catch.hpp>

#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "ssh/known_hosts.h"
#include "tests/support/sshd_cluster.h"

using namespace hvdrun::ssh;

namespace {

std::string blob_of(const std::string& pub_line) {
  std::istringstream in(pub_line);
  std::string type, b64;
  in >> type >> b64;
  std::string blob;
  REQUIRE(base64_decode(b64, blob));
  return blob;
}

std::string keygen(const std::string& dir, const std::string& name) {
  std::string out;
  REQUIRE(hvdrun::testing::run_process(
              {"ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", dir + "/" + name}, &out) == 0);
  std::ifstream in(dir + "/" + name + ".pub");
  std::string line;
  std::getline(in, line);
  return line;
}

struct TempDir {
  std::string path;
  TempDir() {
    char tmpl[] = "/tmp/hvdrun-kh-XXXXXX";
    path = ::mkdtemp(tmpl);
  }
  ~TempDir() { std::filesystem::remove_all(path); }
};

}  // namespace

TEST_CASE("base64 round trips", "[known_hosts]") {
  for (const std::string& s :
       std::vector<std::string>{"", "a", "ab", "abc", "abcd", std::string("\0\xff\x10", 3)}) {
    std::string back;
    REQUIRE(base64_decode(base64_encode(s), back));
    CHECK(back == s);
  }
  std::string out;
  CHECK_FALSE(base64_decode("not base64!", out));
}

TEST_CASE("plain entries, ports, patterns, mismatch lines and revocation", "[known_hosts]") {
  TempDir dir;
  auto key1 = keygen(dir.path, "k1");
  auto key2 = keygen(dir.path, "k2");
  auto b1 = blob_of(key1);
  auto b2 = blob_of(key2);
  CHECK(key_type_of_blob(b1) == "ssh-ed25519");
  CHECK(known_hosts_name("h", 22) == "h");
  CHECK(known_hosts_name("h", 2222) == "[h]:2222");

  std::string text =
      "# header\n"
      "gpu1,10.0.0.1 " +
      key1 +
      "\n"
      "[gpu2]:2222 " +
      key1 +
      "\n"
      "*.lab,!bad.lab " +
      key2 +
      "\n"
      "@revoked evil " +
      key1 +
      "\n"
      "@cert-authority * " +
      key2 +
      "\n"
      "broken line\n";
  CHECK(check_known_host_text(text, "gpu1", 22, b1).status == HostKeyStatus::match);
  CHECK(check_known_host_text(text, "10.0.0.1", 22, b1).status == HostKeyStatus::match);
  auto changed = check_known_host_text(text, "gpu1", 22, b2);
  CHECK(changed.status == HostKeyStatus::mismatch);
  CHECK(changed.line == 2);
  CHECK(check_known_host_text(text, "gpu2", 22, b1).status == HostKeyStatus::not_found);
  CHECK(check_known_host_text(text, "gpu2", 2222, b1).status == HostKeyStatus::match);
  CHECK(check_known_host_text(text, "x.lab", 22, b2).status == HostKeyStatus::match);
  CHECK(check_known_host_text(text, "bad.lab", 22, b2).status == HostKeyStatus::not_found);
  auto revoked = check_known_host_text(text, "evil", 22, b1);
  CHECK(revoked.status == HostKeyStatus::revoked);
  CHECK(revoked.line == 5);
  CHECK(fingerprint_sha256(b1).rfind("SHA256:", 0) == 0);
}

TEST_CASE("hashed entries written by ssh-keygen -H are understood", "[known_hosts]") {
  TempDir dir;
  auto key1 = keygen(dir.path, "k1");
  auto key2 = keygen(dir.path, "k2");
  const std::string file = dir.path + "/known_hosts";
  {
    std::ofstream out(file);
    out << "gpu1 " << key1 << "\n[127.0.0.9]:2200 " << key1 << "\n";
  }
  REQUIRE(hvdrun::testing::run_process({"ssh-keygen", "-q", "-H", "-f", file}) == 0);
  std::ifstream in(file);
  std::string first;
  std::getline(in, first);
  REQUIRE(first.rfind("|1|", 0) == 0);
  CHECK(check_known_host(file, "gpu1", 22, blob_of(key1)).status == HostKeyStatus::match);
  CHECK(check_known_host(file, "127.0.0.9", 2200, blob_of(key1)).status == HostKeyStatus::match);
  auto mismatch = check_known_host(file, "127.0.0.9", 2200, blob_of(key2));
  CHECK(mismatch.status == HostKeyStatus::mismatch);
  CHECK(mismatch.line == 2);
  CHECK(check_known_host(file, "gpu2", 22, blob_of(key1)).status == HostKeyStatus::not_found);
  CHECK(known_key_types(file, "gpu1", 22) == std::vector<std::string>{"ssh-ed25519"});
}

TEST_CASE("append_known_host creates the file and its line is found again", "[known_hosts]") {
  TempDir dir;
  auto key1 = keygen(dir.path, "k1");
  const std::string file = dir.path + "/sub/known_hosts";
  append_known_host(file, "127.0.0.3", 2022, blob_of(key1));
  append_known_host(file, "gpu", 22, blob_of(key1));
  CHECK(check_known_host(file, "127.0.0.3", 2022, blob_of(key1)).status == HostKeyStatus::match);
  CHECK(check_known_host(file, "gpu", 22, blob_of(key1)).status == HostKeyStatus::match);
  CHECK((std::filesystem::status(file).permissions() & std::filesystem::perms::group_read) ==
        std::filesystem::perms::none);
}

TEST_CASE(
    "a known_hosts file others could change, or a FIFO, is refused, never trusted or "
    "waited on",
    "[known_hosts][security]") {
  TempDir dir;
  const auto key = keygen(dir.path, "k1");
  const std::string file = dir.path + "/known_hosts";
  std::ofstream(file) << "gpu " << key << "\n";
  REQUIRE(::chmod(file.c_str(), 0644) == 0);
  CHECK(check_known_host(file, "gpu", 22, blob_of(key)).status == HostKeyStatus::match);
  // Writable by others: they could have added their key for any host.
  REQUIRE(::chmod(file.c_str(), 0666) == 0);
  CHECK_THROWS_WITH(check_known_host(file, "gpu", 22, blob_of(key)),
                    Catch::Contains("'" + file + "' is writable by other users"));
  CHECK(known_key_types(file, "gpu", 22).empty());
  CHECK_THROWS_WITH(append_known_host(file, "gpu2", 22, blob_of(key)),
                    Catch::Contains("is writable by other users"));
  REQUIRE(::chmod(file.c_str(), 0644) == 0);
  if (::geteuid() == 0) {
    REQUIRE(::chown(file.c_str(), 65534, 65534) == 0);
    CHECK_THROWS_WITH(check_known_host(file, "gpu", 22, blob_of(key)),
                      Catch::Contains("belongs to another user, nobody"));
  }
  // A FIFO would block a reader or writer for ever.
  std::filesystem::remove(file);
  REQUIRE(::mkfifo(file.c_str(), 0600) == 0);
  const auto t0 = std::chrono::steady_clock::now();
  CHECK_THROWS_WITH(check_known_host(file, "gpu", 22, blob_of(key)),
                    Catch::Contains("is not a regular file"));
  CHECK_THROWS(append_known_host(file, "gpu", 22, blob_of(key)));
  CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(5));
}
