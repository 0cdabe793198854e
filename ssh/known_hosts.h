// known_hosts(5) checking with file:line answers: plain and `|1|` hashed host fields,
// `[host]:port` names, patterns and negation, @revoked markers; and appending a newly
// accepted key. Own parser rather than libssh2's so a changed key can be reported with
// the exact line to fix, and unknown key types elsewhere in the file do not break it.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace hvdrun::ssh {

/// How a host key compares with a known_hosts file.
enum class HostKeyStatus {
  match,      ///< A line for the host holds this key.
  mismatch,   ///< A line for the host holds another key of the same type.
  not_found,  ///< No line for the host with this key type.
  revoked,    ///< The key is marked @revoked.
};

/// Result of check_known_host().
struct HostKeyCheck {
  /// The comparison.
  HostKeyStatus status = HostKeyStatus::not_found;
  /// For mismatch/revoked: the line (1-based) that disagrees; 0 otherwise.
  int line = 0;
};

/// The name known_hosts uses for host:port: "host" for port 22, "[host]:port" otherwise.
std::string known_hosts_name(std::string_view host, int port);

/// The key type inside an SSH public key blob ("ssh-ed25519", "ecdsa-sha2-nistp256", ...).
std::string key_type_of_blob(std::string_view blob);

/// "SHA256:..." fingerprint of a key blob, as ssh-keygen -l prints it.
std::string fingerprint_sha256(std::string_view blob);

/// Checks `blob` (raw key blob) for host:port against the known_hosts text `text`.
HostKeyCheck check_known_host_text(std::string_view text, std::string_view host, int port,
                                   std::string_view blob);

/// Same against a file; a missing file is not_found. Throws UnsafePath when the file is
/// not a regular file that only this user (or root) can change, SystemError when it
/// cannot be read.
HostKeyCheck check_known_host(const std::string& file, std::string_view host, int port,
                              std::string_view blob);

/// Key types known for host:port in `file`, in file order without repeats.
std::vector<std::string> known_key_types(const std::string& file, std::string_view host, int port);

/// Appends "name type base64" for host:port to `file`, creating it (0600) and its
/// directory (0700) if needed; safe against concurrent appenders. Throws SystemError, or
/// UnsafePath as check_known_host().
void append_known_host(const std::string& file, std::string_view host, int port,
                       std::string_view blob);

/// Base64 encoding / decoding (standard alphabet, padding optional on decode; decode
/// returns false on bad input).
std::string base64_encode(std::string_view data);
/// Decodes standard base64 into `out`; false on invalid input.
bool base64_decode(std::string_view text, std::string& out);

}  // namespace hvdrun::ssh
