// What every subcommand opens first: the root it reads /proc and /sys under, and the
// collector over the memory hierarchy found there.
#include "headroom/cli/commands.h"

namespace headroom::cli {

Result<Host> openHost(const std::string& root) {
  auto fs = FsRoot::open(root);
  if (!fs) return fs.error().wrap("--root");
  Host h;
  h.fs = std::make_unique<FsRoot>(std::move(*fs));
  auto collector = Collector::create(*h.fs);  // holds h.fs: a unique_ptr keeps its address
  if (!collector) return collector.error();
  h.collector = std::make_unique<Collector>(std::move(*collector));
  return h;
}

}  // namespace headroom::cli
