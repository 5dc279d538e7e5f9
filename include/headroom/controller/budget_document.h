// The budget as a JSON document: the decision with the inputs it came from and what the
// controller has learned. The agent serves it on /v1/budget and `headroom budget --format json`
// prints it alike (docs/api.md).
#pragma once

#include <nlohmann/json.hpp>

#include "headroom/controller/controller.h"

namespace headroom {

// `unix_time`: when the decision was made, in seconds since the epoch.
nlohmann::json budgetDocument(const BudgetDecision& d, const ControllerState& learned, double unix_time);

}  // namespace headroom
