// `headroom top`'s screen: the view model (live_view.h) laid out as lines of text for a terminal
// of the state's size. Pure: data in, lines out.
#pragma once

#include <string>
#include <vector>

#include "headroom/report/live_view.h"

namespace headroom {

enum class TopStyle { kNormal, kTitle, kHeader, kSection, kWarning, kKeys };
struct TopLine {
  std::string text;  // at most `cols` bytes of printable text
  TopStyle style = TopStyle::kNormal;
};
// The screen: exactly state.rows lines (the last one the keys), each at most state.cols wide.
// A screen too small for the sections says so, with the keys still shown.
std::vector<TopLine> renderTop(const TopData& data, const TopViewState& state);

}  // namespace headroom
