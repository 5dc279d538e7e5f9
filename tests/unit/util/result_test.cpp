// An error's kind: what an errno says, what a caller judges it to be, what context keeps, and
// the one mapping of kinds to exit codes.
#include <gtest/gtest.h>

#include <cerrno>

#include "headroom/util/exit_codes.h"
#include "headroom/util/result.h"

namespace headroom {
namespace {

TEST(ErrorKinds, AnErrnoSaysItsKind) {
  EXPECT_EQ(sysError(ENOENT, "x").kind, ErrorKind::kNotFound);
  EXPECT_EQ(sysError(ESRCH, "x").kind, ErrorKind::kNotFound);
  EXPECT_EQ(sysError(EACCES, "x").kind, ErrorKind::kNotPermitted);
  EXPECT_EQ(sysError(EPERM, "x").kind, ErrorKind::kNotPermitted);
  EXPECT_EQ(sysError(ENOSYS, "x").kind, ErrorKind::kUnsupported);
  EXPECT_EQ(sysError(EIO, "x").kind, ErrorKind::kIo);
  errno = EISDIR;
  Error e = errnoError("reading /x");
  EXPECT_EQ(e.kind, ErrorKind::kIo);
  EXPECT_EQ(e.code, EISDIR);
  EXPECT_EQ(e.describe(), "reading /x: Is a directory");
}

TEST(ErrorKinds, EachFailureNamesItsKind) {
  EXPECT_EQ(badData("memory.stat: no \"key value\" line").kind, ErrorKind::kBadData);
  EXPECT_EQ(badInput("--interval fast").kind, ErrorKind::kBadInput);
  EXPECT_EQ(usageError("no command").kind, ErrorKind::kUsage);
  EXPECT_EQ(notFound("pid 7 is gone").kind, ErrorKind::kNotFound);
  EXPECT_EQ(unsupported("BPF is not loaded").kind, ErrorKind::kUnsupported);
  EXPECT_EQ(ioError("GET http://x: Connection").kind, ErrorKind::kIo);
  EXPECT_EQ(badData("garbage").code, 0) << "no errno was given";
  EXPECT_EQ(badData("garbage").describe(), "garbage") << "no strerror appended";
}

TEST(ErrorKinds, ContextKeepsTheKindAndACallerMayJudgeAnew) {
  Error e = sysError(ENOENT, "opening /etc/headroom/agent.toml").wrap("--config");
  EXPECT_EQ(e.kind, ErrorKind::kNotFound);
  EXPECT_EQ(e.message, "--config: opening /etc/headroom/agent.toml");
  Error judged = e.as(ErrorKind::kBadInput);
  EXPECT_EQ(judged.kind, ErrorKind::kBadInput);
  EXPECT_EQ(judged.code, ENOENT) << "the errno stays";
  EXPECT_EQ(judged.describe(), e.describe());
  Result<int> r = e;
  auto as_bad = std::move(r).as(ErrorKind::kBadInput);
  ASSERT_FALSE(as_bad);
  EXPECT_EQ(as_bad.error().kind, ErrorKind::kBadInput);
  Result<int> value = 7;
  EXPECT_EQ(*std::move(value).as(ErrorKind::kBadInput), 7) << "a value passes through";
}

TEST(ErrorKinds, OneMappingToExitCodes) {
  EXPECT_EQ(exitCodeFor(badInput("--interval fast: not a duration")), kExitBadInput);
  EXPECT_EQ(exitCodeFor(usageError("no command: headroom run -- CMD")), kExitBadInput);
  EXPECT_EQ(exitCodeFor(makeError(ErrorKind::kNotPlaced, "moving the prover")), 126);
  EXPECT_EQ(exitCodeFor(makeError(ErrorKind::kNotStarted, "starting cuzk", ENOENT)), 127);
  for (ErrorKind k : {ErrorKind::kIo, ErrorKind::kBadData, ErrorKind::kNotFound, ErrorKind::kNotPermitted,
                      ErrorKind::kUnsupported, ErrorKind::kUnavailable})
    EXPECT_EQ(exitCodeFor(makeError(k, "x")), kExitFailure) << toString(k);
}

}  // namespace
}  // namespace headroom
