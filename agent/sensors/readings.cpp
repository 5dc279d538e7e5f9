#include "headroom/sensors/readings.h"

namespace headroom {

const char* toString(SensorState s) {
  switch (s) {
    case SensorState::kActive: return "active";
    case SensorState::kDegraded: return "degraded";
    case SensorState::kOff: return "off";
  }
  return "unknown";
}

}  // namespace headroom
