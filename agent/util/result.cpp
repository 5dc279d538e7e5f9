#include "headroom/util/result.h"

#include "headroom/util/exit_codes.h"

namespace headroom {

const char* toString(ErrorKind k) {
  switch (k) {
    case ErrorKind::kIo: return "io";
    case ErrorKind::kBadInput: return "bad_input";
    case ErrorKind::kBadData: return "bad_data";
    case ErrorKind::kNotFound: return "not_found";
    case ErrorKind::kNotPermitted: return "not_permitted";
    case ErrorKind::kUnsupported: return "unsupported";
    case ErrorKind::kUnavailable: return "unavailable";
    case ErrorKind::kNotPlaced: return "not_placed";
    case ErrorKind::kNotStarted: return "not_started";
  }
  return "?";
}

ErrorKind kindOfErrno(int code) {
  switch (code) {
    case 0: return ErrorKind::kBadData;
    case ENOENT:
    case ESRCH: return ErrorKind::kNotFound;
    case EPERM:
    case EACCES: return ErrorKind::kNotPermitted;
    case ENOSYS:
    case EOPNOTSUPP:
    case ENODEV: return ErrorKind::kUnsupported;
    default: return ErrorKind::kIo;
  }
}

int exitCodeFor(const Error& e) {
  switch (e.kind) {
    case ErrorKind::kBadInput: return kExitBadInput;
    case ErrorKind::kNotPlaced: return kExitNotPlaced;
    case ErrorKind::kNotStarted: return kExitNotStarted;
    default: return kExitFailure;
  }
}

}  // namespace headroom
