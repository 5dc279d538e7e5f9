// `headroom top`'s terminal: ncurses behind a small class, so that nothing else includes its
// macros. Opening takes over the terminal; destroying the object gives it back as it was.
#pragma once

#include <memory>
#include <vector>

#include "headroom/report/live_screen.h"
#include "headroom/util/result.h"

namespace headroom::cli {

class TopTerminal {
 public:
  // Whether stdin and stdout are a terminal (bad input when not), said before anything starts.
  static Status available();
  // Fails (bad input) when stdin or stdout is not a terminal, or the terminal type is unknown.
  static Result<std::unique_ptr<TopTerminal>> open();
  ~TopTerminal();  // endwin: the screen, modes and cursor as they were
  TopTerminal(const TopTerminal&) = delete;
  TopTerminal& operator=(const TopTerminal&) = delete;

  int rows() const;
  int cols() const;
  // Draws over the last frame: only what changed reaches the terminal, so nothing flickers.
  void draw(const std::vector<TopLine>& lines);
  // The next key within `timeout_ms`: a character, kTopKeyResize, or -1 when none came.
  int readKey(int timeout_ms);

 private:
  TopTerminal() = default;
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace headroom::cli
