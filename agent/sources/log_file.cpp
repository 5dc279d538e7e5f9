#include "headroom/sources/log_file.h"

#include <fcntl.h>
#include <unistd.h>
#include <zlib.h>

#include <fmt/format.h>

#include <cerrno>
#include <cstring>
#include <sstream>

#include "headroom/sources/fs_root.h"

namespace headroom {

Result<std::string> gunzipIfCompressed(std::string bytes, std::string_view what) {
  if (bytes.size() < 2 || static_cast<unsigned char>(bytes[0]) != 0x1f || static_cast<unsigned char>(bytes[1]) != 0x8b)
    return bytes;
  std::string out;
  z_stream z{};
  // 16 + MAX_WBITS: a gzip header and trailer around the deflate stream.
  if (inflateInit2(&z, 16 + MAX_WBITS) != Z_OK) return ioError(fmt::format("{}: zlib would not start", what));
  z.next_in = reinterpret_cast<Bytef*>(bytes.data());
  z.avail_in = static_cast<uInt>(bytes.size());
  char buf[1 << 16];
  int rc = Z_OK;
  for (;;) {
    z.next_out = reinterpret_cast<Bytef*>(buf);
    z.avail_out = sizeof buf;
    rc = inflate(&z, Z_NO_FLUSH);
    if (rc != Z_OK && rc != Z_STREAM_END) break;
    out.append(buf, sizeof buf - z.avail_out);
    if (out.size() > kMaxLogBytes) {
      inflateEnd(&z);
      return badInput(fmt::format("{}: more than {} MiB once decompressed", what, kMaxLogBytes >> 20));
    }
    if (rc == Z_STREAM_END) {
      if (z.avail_in == 0) break;
      // Another member follows (files concatenated with cat, or a log appended to by gzip -a).
      if (inflateReset(&z) != Z_OK) break;
    }
  }
  inflateEnd(&z);
  if (rc != Z_STREAM_END)
    return badInput(fmt::format("{}: a damaged gzip file ({}) after {} bytes of text", what,
                                z.msg != nullptr ? z.msg : (rc == Z_BUF_ERROR ? "it ends early" : "zlib error"),
                                out.size()));
  return out;
}

Result<std::string> readLogFile(const std::string& path, std::istream& in) {
  std::string bytes;
  std::string what = path == "-" ? std::string("standard input") : path;
  if (path == "-") {
    std::ostringstream ss;
    ss << in.rdbuf();
    bytes = ss.str();
  } else {
    Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
    if (!fd.valid()) return badInput(fmt::format("reading {}: {}", path, std::strerror(errno)));
    char buf[1 << 16];
    for (;;) {
      ssize_t n = ::read(fd.get(), buf, sizeof buf);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) return badInput(fmt::format("reading {}: {}", path, std::strerror(errno)));
      if (n == 0) break;
      bytes.append(buf, static_cast<std::size_t>(n));
      if (bytes.size() > kMaxLogBytes) return badInput(fmt::format("{}: more than {} MiB", what, kMaxLogBytes >> 20));
    }
  }
  if (bytes.size() > kMaxLogBytes) return badInput(fmt::format("{}: more than {} MiB", what, kMaxLogBytes >> 20));
  return gunzipIfCompressed(std::move(bytes), what);
}

}  // namespace headroom
