// known_hosts parsing and matching (see known_hosts.h for why it is our own).
#include "ssh/known_hosts.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/sha.h>

#include <algorithm>
#include <cctype>
#include <cstring>

#include "common/error.h"
#include "common/fd.h"
#include "common/safe_path.h"
#include "ssh/config.h"

namespace hvdrun::ssh {
namespace {

constexpr char kAlphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

std::vector<std::string_view> split(std::string_view s, char sep) {
  std::vector<std::string_view> out;
  std::size_t pos = 0;
  for (;;) {
    auto next = s.find(sep, pos);
    out.push_back(
        s.substr(pos, next == std::string_view::npos ? std::string_view::npos : next - pos));
    if (next == std::string_view::npos) break;
    pos = next + 1;
  }
  return out;
}

std::vector<std::string_view> words(std::string_view s) {
  std::vector<std::string_view> out;
  std::size_t i = 0;
  while (i < s.size()) {
    while (i < s.size() && std::isspace(static_cast<unsigned char>(s[i]))) ++i;
    auto start = i;
    while (i < s.size() && !std::isspace(static_cast<unsigned char>(s[i]))) ++i;
    if (i > start) out.push_back(s.substr(start, i - start));
  }
  return out;
}

// `|1|salt|hash`: hash = HMAC-SHA1(key = salt, name).
bool hashed_matches(std::string_view field, std::string_view name) {
  auto parts = split(field.substr(3), '|');
  if (parts.size() != 2) return false;
  std::string salt, hash;
  if (!base64_decode(parts[0], salt) || !base64_decode(parts[1], hash)) return false;
  unsigned char mac[EVP_MAX_MD_SIZE];
  unsigned int mac_len = 0;
  if (!HMAC(EVP_sha1(), salt.data(), static_cast<int>(salt.size()),
            reinterpret_cast<const unsigned char*>(name.data()), name.size(), mac, &mac_len)) {
    return false;
  }
  return hash.size() == mac_len &&
         std::equal(hash.begin(), hash.end(), reinterpret_cast<const char*>(mac));
}

bool host_field_matches(std::string_view field, std::string_view name) {
  if (field.substr(0, 3) == "|1|") return hashed_matches(field, name);
  std::vector<std::string> patterns;
  for (auto p : split(field, ',')) patterns.emplace_back(p);
  return host_matches(name, patterns);
}

struct Line {
  int number;
  bool revoked;
  std::string_view type;
  std::string blob;
};

// Calls fn(Line) for every usable line of `text` that names host:port.
template <typename Fn>
void for_each_line_for(std::string_view text, std::string_view host, int port, Fn fn) {
  const std::string name = known_hosts_name(host, port);
  int number = 0;
  for (auto raw : split(text, '\n')) {
    ++number;
    auto w = words(raw);
    if (w.empty() || w[0][0] == '#') continue;
    bool revoked = false;
    if (w[0][0] == '@') {
      if (w[0] == "@revoked") {
        revoked = true;
      } else {
        continue;  // @cert-authority: host certificates are not used by hvdrun
      }
      w.erase(w.begin());
    }
    if (w.size() < 3) continue;
    if (!host_field_matches(w[0], name)) continue;
    std::string blob;
    if (!base64_decode(w[2], blob)) continue;
    fn(Line{number, revoked, w[1], std::move(blob)});
  }
}

// A known_hosts file decides whom the job trusts: it must be a regular file that only this
// user (or root) can change, or another user could add their key for a host
// (common/safe_path.h). `fd` is open on `path`.
void check_trusted_file(int fd, const std::string& path) {
  struct stat st {};
  if (::fstat(fd, &st) != 0) throw_errno("examining known_hosts file " + path, "fstat");
  if (!S_ISREG(st.st_mode)) throw UnsafePath(path, "is not a regular file");
  if (!trusted_owner(st.st_uid))
    throw UnsafePath(path, "belongs to another user, " + user_text(st.st_uid) +
                               ", who could add a key of theirs for any host");
  if ((st.st_mode & (S_IWGRP | S_IWOTH)) != 0)
    throw UnsafePath(path,
                     "is writable by other users, who could add a key of theirs for "
                     "any host");
}

// The whole known_hosts file; empty when it does not exist. Never waits on a FIFO.
std::string read_file(const std::string& path) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK));
  if (!fd && errno == ENOENT) return {};
  if (!fd) throw_errno("reading known_hosts file " + path, "open");
  check_trusted_file(fd.get(), path);
  std::string text;
  char buf[65536];
  for (;;) {
    const ssize_t n = ::read(fd.get(), buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw_errno("reading known_hosts file " + path, "read");
    if (n == 0) return text;
    text.append(buf, static_cast<std::size_t>(n));
  }
}

}  // namespace

std::string base64_encode(std::string_view data) {
  std::string out;
  std::size_t i = 0;
  while (i + 2 < data.size()) {
    unsigned v = (static_cast<unsigned char>(data[i]) << 16) |
                 (static_cast<unsigned char>(data[i + 1]) << 8) |
                 static_cast<unsigned char>(data[i + 2]);
    out += kAlphabet[(v >> 18) & 63];
    out += kAlphabet[(v >> 12) & 63];
    out += kAlphabet[(v >> 6) & 63];
    out += kAlphabet[v & 63];
    i += 3;
  }
  if (i < data.size()) {
    unsigned v = static_cast<unsigned char>(data[i]) << 16;
    if (i + 1 < data.size()) v |= static_cast<unsigned char>(data[i + 1]) << 8;
    out += kAlphabet[(v >> 18) & 63];
    out += kAlphabet[(v >> 12) & 63];
    out += i + 1 < data.size() ? kAlphabet[(v >> 6) & 63] : '=';
    out += '=';
  }
  return out;
}

bool base64_decode(std::string_view text, std::string& out) {
  out.clear();
  unsigned value = 0;
  int bits = 0;
  for (char c : text) {
    if (c == '=') break;
    const char* p = std::strchr(kAlphabet, c);
    if (c == '\0' || p == nullptr) return false;
    value = (value << 6) | static_cast<unsigned>(p - kAlphabet);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out += static_cast<char>((value >> bits) & 0xff);
    }
  }
  return true;
}

std::string known_hosts_name(std::string_view host, int port) {
  if (port == 22) return std::string(host);
  return "[" + std::string(host) + "]:" + std::to_string(port);
}

std::string key_type_of_blob(std::string_view blob) {
  if (blob.size() < 4) return {};
  std::uint32_t n =
      (static_cast<unsigned char>(blob[0]) << 24) | (static_cast<unsigned char>(blob[1]) << 16) |
      (static_cast<unsigned char>(blob[2]) << 8) | static_cast<unsigned char>(blob[3]);
  if (n > blob.size() - 4) return {};
  return std::string(blob.substr(4, n));
}

std::string fingerprint_sha256(std::string_view blob) {
  unsigned char digest[SHA256_DIGEST_LENGTH];
  SHA256(reinterpret_cast<const unsigned char*>(blob.data()), blob.size(), digest);
  auto b64 = base64_encode(std::string_view(reinterpret_cast<const char*>(digest), sizeof digest));
  while (!b64.empty() && b64.back() == '=') b64.pop_back();
  return "SHA256:" + b64;
}

HostKeyCheck check_known_host_text(std::string_view text, std::string_view host, int port,
                                   std::string_view blob) {
  const std::string type = key_type_of_blob(blob);
  HostKeyCheck result;
  bool matched = false;
  for_each_line_for(text, host, port, [&](const Line& line) {
    if (line.blob == blob) {
      if (line.revoked) {
        if (result.status != HostKeyStatus::revoked) result = {HostKeyStatus::revoked, line.number};
      } else {
        matched = true;
      }
    } else if (!line.revoked && line.type == type && result.status == HostKeyStatus::not_found) {
      result = {HostKeyStatus::mismatch, line.number};
    }
  });
  if (result.status == HostKeyStatus::revoked) return result;
  if (matched) return {HostKeyStatus::match, 0};
  return result;
}

HostKeyCheck check_known_host(const std::string& file, std::string_view host, int port,
                              std::string_view blob) {
  return check_known_host_text(read_file(file), host, port, blob);
}

std::vector<std::string> known_key_types(const std::string& file, std::string_view host, int port) {
  std::vector<std::string> types;
  std::string text;
  try {
    text = read_file(file);
  } catch (const std::exception&) {
    return types;  // check_known_host() refuses the file with the reason
  }
  for_each_line_for(text, host, port, [&](const Line& line) {
    if (line.revoked) return;
    std::string type(line.type);
    if (std::find(types.begin(), types.end(), type) == types.end()) types.push_back(type);
  });
  return types;
}

void append_known_host(const std::string& file, std::string_view host, int port,
                       std::string_view blob) {
  auto slash = file.rfind('/');
  if (slash != std::string::npos && slash > 0) {
    std::string dir = file.substr(0, slash);
    if (::mkdir(dir.c_str(), 0700) < 0 && errno != EEXIST) {
      throw_errno("recording the host key of " + known_hosts_name(host, port) + " in " + file,
                  "mkdir");
    }
  }
  UniqueFd fd(::open(file.c_str(),
                     O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC | O_NOCTTY | O_NONBLOCK, 0600));
  if (!fd)
    throw_errno("recording the host key of " + known_hosts_name(host, port) + " in " + file,
                "open");
  check_trusted_file(fd.get(), file);
  set_nonblocking(fd.get(), false);
  if (::flock(fd.get(), LOCK_EX) < 0) throw_errno("locking " + file, "flock");
  // Start on a fresh line even if the file does not end with a newline.
  std::string line;
  struct stat st {};
  if (::fstat(fd.get(), &st) == 0 && st.st_size > 0) {
    char last = '\n';
    UniqueFd rd(::open(file.c_str(), O_RDONLY | O_CLOEXEC));
    if (rd && ::pread(rd.get(), &last, 1, st.st_size - 1) == 1 && last != '\n') line += '\n';
  }
  line += known_hosts_name(host, port) + " " + key_type_of_blob(blob) + " " + base64_encode(blob) +
          "\n";
  if (!write_all(fd.get(), line.data(), line.size())) throw_errno("writing " + file, "write");
}

}  // namespace hvdrun::ssh
