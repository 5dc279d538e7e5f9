// An HTTP answer as headroom handles one: what a route of the server returns, and what the
// client gets back. One shape for both, so that a test can hand one to the other.
#pragma once

#include <string>

namespace headroom {

struct HttpResponse {
  int status = 200;
  std::string content_type = "application/json";
  std::string body;
};

}  // namespace headroom
