// Durable small files for what headroom keeps (the controller's state, the budget file, the
// OOM journal): directories made on demand, whole writes, fsync of file and directory, and
// the atomic replace (temporary file, fsync, rename, fsync of the directory).
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

#include "headroom/util/result.h"

namespace headroom {

// "/a/b/c" -> "/a/b"; "/c" -> "/"; "c" -> ".".
std::string parentDirectory(const std::string& path);
// mkdir -p (0755); an existing non-directory on the way is an error naming it.
Status makeDirectories(const std::string& dir);
// fsync of a directory, so that a create, rename or unlink in it survives a crash (best effort).
void syncDirectory(const std::string& dir);
// write() until everything is written (EINTR retried); errors name `display`.
Status writeAll(int fd, std::string_view content, std::string_view display);
// Replaces `path` atomically: a reader sees the old content or the new, never half.
Status writeFileAtomic(const std::string& path, std::string_view content);
// The whole of a small file headroom keeps (`what`: "state file", ...): nullopt when it does not
// exist; an error naming `what` and the path when it cannot be read, is not a regular file (a
// FIFO is never waited on), or is larger than `max_bytes`.
Result<std::optional<std::string>> readSmallFile(const std::string& path, std::size_t max_bytes, std::string_view what);

}  // namespace headroom
