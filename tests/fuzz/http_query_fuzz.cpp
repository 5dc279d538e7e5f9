// The HTTP routes' query strings: the server's query parser (cpp-httplib's, as HttpServer uses
// it), then each route that reads parameters (/v1/ooms ?limit=, POST /v1/probe ?cgroup= and the
// probe's options); and --listen's address. The input: a query string, or ADDRESS NUL QUERY.
#include <httplib.h>

#include "fuzz_support.h"
#include "headroom/daemon/http_api.h"
#include "headroom/incidents/kill_board.h"
#include "headroom/net/http_server.h"
#include "headroom/net/listen_address.h"

namespace {

headroom::HttpApi& api() {
  using namespace headroom;
  static Exporter exporter{ExporterLimits{}};
  static KillBoard kills;
  // No probe command: a probe request is checked as far as running `headroom probe`.
  static HttpApi a(exporter, kills, {}, "no probe in the fuzz target");
  static const bool configured = [] {
    ApiSettings s;
    s.probe_enabled = true;
    s.probe_min_interval = std::chrono::milliseconds(0);
    a.configure(s);
    kills.setCapacity(4);
    for (int i = 0; i < 3; ++i) kills.addOom(OomEvent{}, {});
    return true;
  }();
  (void)configured;
  return a;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace headroom;
  std::string_view text = fuzz::text(data, size);
  auto nul = text.find('\0');
  if (nul != std::string_view::npos) {
    auto addr = listenAddressFromText(text.substr(0, nul));
    if (addr) {
      auto again = listenAddressFromText(addr->text());
      fuzz::require(again.has_value() && *again == *addr, "an address's text names the same address");
    }
    text.remove_prefix(nul + 1);
  }
  httplib::Params params;
  httplib::detail::parse_query_text(std::string(text), params);
  HttpQuery q;
  for (const auto& [k, v] : params) q[k] = v;  // as HttpServer hands them to a route
  static auto gets = api().getRoutes();
  static auto posts = api().postRoutes();
  HttpResponse ooms = gets.at("/v1/ooms")(q);
  fuzz::require(ooms.status == 200 || ooms.status == 400, "/v1/ooms answers or refuses the query");
  fuzz::require(nlohmann::json::accept(ooms.body), "/v1/ooms answers JSON");
  HttpResponse probe = posts.at("/v1/probe")(q);
  fuzz::require(probe.status == 400 || probe.status == 500, "a probe request is refused or reaches the command");
  fuzz::require(nlohmann::json::accept(probe.body), "/v1/probe answers JSON");
  return 0;
}
