// Key-based login for libssh2 sessions: agent keys, identity files, default keys, and the
// message that lists every key tried when none was accepted.
#include "ssh/libssh2_auth.h"

#include <sys/stat.h>

#include <algorithm>
#include <cctype>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string_view>
#include <vector>

#include "ssh/known_hosts.h"

namespace hvdrun::ssh {
namespace {

std::string read_prefix(const std::string& path, std::size_t max, bool& readable) {
  std::ifstream in(path, std::ios::binary);
  readable = static_cast<bool>(in);
  if (!in) return {};
  std::string data(max, '\0');
  in.read(data.data(), static_cast<std::streamsize>(max));
  data.resize(static_cast<std::size_t>(in.gcount()));
  return data;
}

bool file_exists(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0;
}

[[noreturn]] void auth_timed_out(const std::string& address) {
  throw ConnectError(Verdict::timeout,
                     "authentication did not finish before the deadline (--start-timeout)",
                     "check the load on the host; raise --start-timeout", address);
}

// What the key-based login tried, for the message when nothing was accepted.
struct AuthAttempts {
  std::vector<std::string> tried;
  std::string encrypted_key;  // the first passphrase-protected key file
  std::string first_key;      // the first key file that exists
  bool disconnected = false;  // the server hung up (MaxAuthTries): stop trying
};

// Public blobs of the key files (from their .pub), for IdentitiesOnly.
std::vector<std::string> public_blobs(const std::vector<std::string>& identity_files) {
  std::vector<std::string> wanted;
  for (const auto& f : identity_files) {
    bool readable = false;
    std::istringstream pub(read_prefix(f + ".pub", 16 * 1024, readable));
    std::string type, b64, blob;
    if (readable && pub >> type >> b64 && base64_decode(b64, blob)) wanted.push_back(blob);
  }
  return wanted;
}

// The agent's keys, one after another; true once one is accepted.
bool try_agent_keys(const Target& t, Core& core, Deadline deadline, const std::string& address,
                    AuthAttempts& a) {
  if (t.agent_socket.empty()) return false;
  LIBSSH2_AGENT* agent = libssh2_agent_init(core.session);
  if (agent == nullptr) return false;
  bool accepted = false;
  libssh2_agent_set_identity_path(agent, t.agent_socket.c_str());
  if (libssh2_agent_connect(agent) == 0 && libssh2_agent_list_identities(agent) == 0) {
    libssh2_agent_publickey* identity = nullptr;
    libssh2_agent_publickey* prev = nullptr;
    const std::vector<std::string> wanted =
        t.identities_only ? public_blobs(t.identity_files) : std::vector<std::string>{};
    while (!accepted && libssh2_agent_get_identity(agent, &identity, prev) == 0) {
      prev = identity;
      if (t.identities_only && std::find(wanted.begin(), wanted.end(),
                                         std::string(reinterpret_cast<const char*>(identity->blob),
                                                     identity->blob_len)) == wanted.end()) {
        continue;
      }
      int rc = core.call(deadline,
                         [&] { return libssh2_agent_userauth(agent, t.user.c_str(), identity); });
      if (rc == 0) {
        accepted = true;
        break;
      }
      if (rc == LIBSSH2_ERROR_TIMEOUT) {
        libssh2_agent_disconnect(agent);
        libssh2_agent_free(agent);
        auth_timed_out(address);
      }
      a.tried.push_back("agent key '" + std::string(identity->comment ? identity->comment : "") +
                        "'");
      if (rc == LIBSSH2_ERROR_SOCKET_DISCONNECT || rc == LIBSSH2_ERROR_SOCKET_RECV) {
        a.disconnected = true;
        break;
      }
    }
  } else {
    a.tried.push_back("ssh-agent at " + t.agent_socket + " (cannot connect or list keys)");
  }
  libssh2_agent_disconnect(agent);
  libssh2_agent_free(agent);
  return accepted;
}

// The key files: -i and IdentityFile first, then the default ones; true once one is
// accepted.
bool try_key_files(const Target& t, Core& core, Deadline deadline, const std::string& address,
                   AuthAttempts& a) {
  std::vector<std::pair<std::string, bool>> files;  // path, explicitly named
  for (const auto& f : t.identity_files) files.emplace_back(f, true);
  for (const auto& f : t.default_identity_files) files.emplace_back(f, false);
  for (const auto& file : files) {
    // Named references, not a structured binding: the lambda below captures the path.
    const std::string& path = file.first;
    const bool explicit_key = file.second;
    if (a.disconnected) break;
    if (!file_exists(path)) {
      if (explicit_key) a.tried.push_back(path + " (missing)");
      continue;
    }
    if (a.first_key.empty()) a.first_key = path;
    bool readable = true;
    if (key_is_encrypted(path, readable)) {
      a.tried.push_back(path + " (passphrase-protected)");
      if (a.encrypted_key.empty()) a.encrypted_key = path;
      continue;
    }
    if (!readable) {
      a.tried.push_back(path + " (unreadable)");
      continue;
    }
    int rc = core.call(deadline, [&] {
      return libssh2_userauth_publickey_fromfile_ex(core.session, t.user.c_str(),
                                                    static_cast<unsigned>(t.user.size()), nullptr,
                                                    path.c_str(), nullptr);
    });
    if (rc == 0) return true;
    if (rc == LIBSSH2_ERROR_TIMEOUT) auth_timed_out(address);
    if (rc == LIBSSH2_ERROR_FILE) {
      a.tried.push_back(path + " (cannot load: " + core.last_error() + ")");
    } else if (rc == LIBSSH2_ERROR_SOCKET_DISCONNECT || rc == LIBSSH2_ERROR_SOCKET_RECV ||
               rc == LIBSSH2_ERROR_SOCKET_SEND) {
      a.tried.push_back(path +
                        " (server closed the connection: too many keys tried? see MaxAuthTries)");
      a.disconnected = true;
    } else {
      a.tried.push_back(path + " (not accepted)");
    }
  }
  return false;
}

// Every key tried and refused: say which, and how to authorise one.
[[noreturn]] void no_key_accepted(const Target& t, const AuthAttempts& a,
                                  const std::string& address) {
  const std::string who = t.user + "@" + t.hostname;
  std::string list;
  for (const auto& k : a.tried) list += (list.empty() ? "" : ", ") + k;
  if (list.empty())
    list = "no keys: no agent, no -i, no IdentityFile, no ~/.ssh/id_ed25519, id_ecdsa or id_rsa";
  std::string detail = "no key accepted for " + who + "; tried: " + list;
  // The key to authorise: the first one that exists, else the first one asked for.
  std::string key = a.first_key;
  if (key.empty()) key = t.identity_files.empty() ? "~/.ssh/id_ed25519" : t.identity_files.front();
  std::string fix = "ssh-copy-id -i " + key + " -p " + std::to_string(t.port) + " " + who;
  if (a.first_key.empty()) fix = "ssh-keygen -t ed25519 -f " + key + ", then " + fix;
  if (!a.encrypted_key.empty() && t.agent_socket.empty()) {
    detail = a.encrypted_key +
             " is passphrase-protected and no ssh-agent is running (SSH_AUTH_SOCK unset); " +
             detail;
    fix = "eval \"$(ssh-agent)\" && ssh-add " + a.encrypted_key + "; or authorise a key: " + fix;
  }
  throw ConnectError(Verdict::auth, detail, fix, address);
}

}  // namespace

void authenticate(const Target& t, Core& core, Deadline deadline, const std::string& address) {
  // userauth_list both asks which methods are allowed and tries "none".
  char* methods = nullptr;
  for (;;) {
    methods =
        libssh2_userauth_list(core.session, t.user.c_str(), static_cast<unsigned>(t.user.size()));
    if (methods != nullptr || libssh2_userauth_authenticated(core.session)) break;
    if (libssh2_session_last_errno(core.session) != LIBSSH2_ERROR_EAGAIN) {
      throw ConnectError(Verdict::auth, "the server ended the login: " + core.last_error(),
                         "check sshd's log on the host (MaxStartups, AllowUsers)", address);
    }
    if (!core.wait(deadline)) auth_timed_out(address);
  }
  if (libssh2_userauth_authenticated(core.session)) return;
  if (std::strstr(methods, "publickey") == nullptr) {
    throw ConnectError(Verdict::auth,
                       "the server accepts only '" + std::string(methods) + "' for " + t.user +
                           "@" + t.hostname + "; hvdrun logs in with keys only",
                       "enable PubkeyAuthentication in the host's sshd_config", address);
  }
  AuthAttempts attempts;
  if (try_agent_keys(t, core, deadline, address, attempts)) return;
  if (try_key_files(t, core, deadline, address, attempts)) return;
  no_key_accepted(t, attempts, address);
}

bool key_is_encrypted(const std::string& path, bool& readable) {
  std::string text = read_prefix(path, 64 * 1024, readable);
  if (!readable) return false;
  if (text.find("Proc-Type: 4,ENCRYPTED") != std::string::npos) return true;
  if (text.find("BEGIN ENCRYPTED PRIVATE KEY") != std::string::npos) return true;
  constexpr std::string_view kBegin = "-----BEGIN OPENSSH PRIVATE KEY-----";
  auto begin = text.find(kBegin);
  if (begin == std::string::npos) return false;
  auto end = text.find("-----END", begin + kBegin.size());
  std::string b64;
  for (std::size_t i = begin + kBegin.size(); i < std::min(end, text.size()); ++i) {
    if (!std::isspace(static_cast<unsigned char>(text[i]))) b64 += text[i];
  }
  std::string raw;
  if (!base64_decode(b64, raw)) return false;
  constexpr std::string_view kMagic("openssh-key-v1\0", 15);
  if (raw.compare(0, kMagic.size(), kMagic) != 0 || raw.size() < kMagic.size() + 4) return false;
  std::string cipher = key_type_of_blob(std::string_view(raw).substr(kMagic.size()));
  return !cipher.empty() && cipher != "none";
}

}  // namespace hvdrun::ssh
