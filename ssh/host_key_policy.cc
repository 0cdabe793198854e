// Host-key policy for libssh2 logins: the algorithm preference from known_hosts, and the
// known_hosts check with its fixes (ssh-keygen -R, accept-new).
#include "ssh/host_key_policy.h"

#include <spdlog/spdlog.h>

#include <algorithm>

#include "common/safe_path.h"
#include "ssh/known_hosts.h"

namespace hvdrun::ssh {

std::string hostkey_preference(LIBSSH2_SESSION* session, const std::vector<std::string>& known) {
  std::vector<std::string> all = {"ssh-ed25519",
                                  "ecdsa-sha2-nistp256",
                                  "ecdsa-sha2-nistp384",
                                  "ecdsa-sha2-nistp521",
                                  "rsa-sha2-512",
                                  "rsa-sha2-256",
                                  "ssh-rsa"};
  const char** algs = nullptr;
  int n = libssh2_session_supported_algs(session, LIBSSH2_METHOD_HOSTKEY, &algs);
  if (n <= 0) return {};
  std::vector<std::string> supported(algs, algs + n);
  libssh2_free(session, static_cast<void*>(algs));
  auto usable = [&](const std::string& a) {
    return std::find(supported.begin(), supported.end(), a) != supported.end();
  };
  std::vector<std::string> order;
  auto add = [&](const std::string& a) {
    if (usable(a) && std::find(order.begin(), order.end(), a) == order.end()) order.push_back(a);
  };
  for (const auto& k : known) {
    if (k == "ssh-rsa") {
      for (const char* r : {"rsa-sha2-512", "rsa-sha2-256", "ssh-rsa"}) add(r);
    } else if (std::find(all.begin(), all.end(), k) != all.end()) {
      add(k);
    }
  }
  for (const auto& a : all) add(a);
  std::string out;
  for (const auto& o : order) out += (out.empty() ? "" : ",") + o;
  return out;
}

std::string check_host_key(const Target& t, Core& core, const std::string& address) {
  std::size_t len = 0;
  int type = 0;
  const char* key = libssh2_session_hostkey(core.session, &len, &type);
  if (key == nullptr) throw ConnectError(Verdict::not_ssh, "the server sent no host key");
  std::string_view blob(key, len);
  const std::string name = known_hosts_name(t.hostname, t.port);
  const std::string fp = key_type_of_blob(blob) + " " + fingerprint_sha256(blob);
  auto fail = [&](Verdict v, std::string detail, std::string fix) {
    return ConnectError(v, std::move(detail), std::move(fix), address);
  };
  HostKeyCheck check;
  try {
    check = check_known_host(t.known_hosts_file, t.hostname, t.port, blob);
  } catch (const UnsafePath& e) {
    throw fail(Verdict::host_key_unknown,
               std::string("the known_hosts file ") + e.what() + "; its keys are not trusted",
               "make it a file of your own that only you can write (chmod go-w), or point "
               "UserKnownHostsFile at one");
  }
  const std::string where = t.known_hosts_file + ":" + std::to_string(check.line);
  const std::string remove = "ssh-keygen -R '" + name + "' -f " + t.known_hosts_file;
  switch (check.status) {
    case HostKeyStatus::match:
      return {};
    case HostKeyStatus::mismatch:
      throw fail(
          Verdict::host_key_changed,
          "host key " + fp + " differs from the one recorded in " + where +
              " (the host was reinstalled, or someone is intercepting the connection)",
          "if the change is expected, remove the old key with `" + remove + "` and run again");
    case HostKeyStatus::revoked:
      throw fail(Verdict::host_key_changed, "host key " + fp + " is marked @revoked in " + where,
                 "give the host a new key, or fix " + where);
    case HostKeyStatus::not_found:
      break;
  }
  if (t.strict == StrictHostKeyChecking::yes) {
    throw fail(
        Verdict::host_key_unknown,
        "host key " + fp + " is not in " + t.known_hosts_file + " and StrictHostKeyChecking is yes",
        "verify the key and record it: `ssh -p " + std::to_string(t.port) + " " + t.user + "@" +
            t.hostname + " true` once, or set StrictHostKeyChecking accept-new for this host");
  }
  try {
    append_known_host(t.known_hosts_file, t.hostname, t.port, blob);
    spdlog::info("ssh {}: added host key {} for {} to {}", t.alias, fp, name, t.known_hosts_file);
    return "new host key " + fp + " recorded in " + t.known_hosts_file;
  } catch (const std::exception& e) {  // SystemError, or UnsafePath after a race
    spdlog::warn("ssh {}: accepted new host key {} but could not record it: {}", t.alias, fp,
                 e.what());
    return "new host key " + fp + " accepted but not recorded: " + e.what();
  }
}

}  // namespace hvdrun::ssh
