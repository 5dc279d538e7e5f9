// The ncurses side of `headroom top`: a screen opened with newterm (initscr would exit the
// process on a failure), lines drawn with erase + refresh, keys read with a timeout.
#include "headroom/cli/top_terminal.h"

#include <curses.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>

namespace headroom::cli {

struct TopTerminal::Impl {
  SCREEN* screen = nullptr;
  bool colors = false;
};

namespace {

enum Pair : short { kPairTitle = 1, kPairSection, kPairWarning, kPairKeys };

int attributesOf(TopStyle s, bool colors) {
  switch (s) {
    case TopStyle::kTitle: return A_BOLD | (colors ? static_cast<int>(COLOR_PAIR(kPairTitle)) : 0);
    case TopStyle::kHeader: return A_UNDERLINE;
    case TopStyle::kSection: return A_BOLD | (colors ? static_cast<int>(COLOR_PAIR(kPairSection)) : 0);
    case TopStyle::kWarning: return A_BOLD | (colors ? static_cast<int>(COLOR_PAIR(kPairWarning)) : 0);
    case TopStyle::kKeys: return colors ? static_cast<int>(COLOR_PAIR(kPairKeys)) : A_REVERSE;
    case TopStyle::kNormal: return A_NORMAL;
  }
  return A_NORMAL;
}

}  // namespace

Status TopTerminal::available() {
  if (::isatty(STDIN_FILENO) == 0 || ::isatty(STDOUT_FILENO) == 0)
    return badInput("stdin and stdout must be a terminal (headroom snapshot prints a table anywhere)");
  return ok();
}

Result<std::unique_ptr<TopTerminal>> TopTerminal::open() {
  if (auto st = available(); !st) return st.error();
  std::unique_ptr<TopTerminal> t(new TopTerminal());
  t->impl_ = std::make_unique<Impl>();
  t->impl_->screen = newterm(nullptr, stdout, stdin);
  if (t->impl_->screen == nullptr) return badInput("the terminal type ($TERM) is unknown to ncurses");
  set_term(t->impl_->screen);
  cbreak();
  noecho();
  nonl();
  keypad(stdscr, TRUE);
  set_escdelay(25);
  curs_set(0);
  if (has_colors() == TRUE && start_color() == OK) {
    use_default_colors();
    init_pair(kPairTitle, COLOR_CYAN, -1);
    init_pair(kPairSection, COLOR_YELLOW, -1);
    init_pair(kPairWarning, COLOR_RED, -1);
    init_pair(kPairKeys, COLOR_BLACK, COLOR_CYAN);
    t->impl_->colors = true;
  }
  return t;
}

TopTerminal::~TopTerminal() {
  if (impl_ && impl_->screen != nullptr) {
    curs_set(1);
    endwin();
    delscreen(impl_->screen);
    std::fflush(stdout);
  }
}

int TopTerminal::rows() const { return getmaxy(stdscr); }
int TopTerminal::cols() const { return getmaxx(stdscr); }

void TopTerminal::draw(const std::vector<TopLine>& lines) {
  // erase, not clear: clear would send the terminal a full repaint each frame.
  erase();
  const int height = getmaxy(stdscr);
  const int width = getmaxx(stdscr);
  for (int y = 0; y < height && y < static_cast<int>(lines.size()); ++y) {
    const TopLine& l = lines[static_cast<std::size_t>(y)];
    const int attrs = attributesOf(l.style, impl_->colors);
    attrset(static_cast<attr_t>(attrs));
    // The last cell of the last line is left alone: writing it scrolls some terminals.
    const int n = std::min(static_cast<int>(l.text.size()), y == height - 1 ? width - 1 : width);
    mvaddnstr(y, 0, l.text.c_str(), n);
    if (l.style == TopStyle::kKeys) {
      for (int x = n; x < width - (y == height - 1 ? 1 : 0); ++x) mvaddch(y, x, ' ');
    }
    attrset(A_NORMAL);
  }
  refresh();
}

int TopTerminal::readKey(int timeout_ms) {
  timeout(timeout_ms);
  const int c = getch();
  if (c == ERR) return -1;
  if (c == KEY_RESIZE) return kTopKeyResize;
  return c;
}

}  // namespace headroom::cli
