// The report's pictures: the last minute before the kill as SVG (the parts stacked, the limit,
// the kill), and the report as a self-contained HTML page around it.
#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <charconv>
#include <climits>
#include <cmath>
#include <map>
#include <optional>

#include "headroom/model/snapshot.h"
#include "headroom/report/report.h"
#include "headroom/sources/parse.h"
#include "headroom/util/text.h"
#include "headroom/util/units.h"
#include "report_parts.h"

namespace headroom {
namespace report_detail {

std::string xmlEscape(std::string_view s) {
  std::string o;
  o.reserve(s.size());
  for (char c : s) {
    switch (c) {
      case '&': o += "&amp;"; break;
      case '<': o += "&lt;"; break;
      case '>': o += "&gt;"; break;
      case '"': o += "&quot;"; break;
      case '\'': o += "&#39;"; break;
      default: o += c;
    }
  }
  return o;
}

namespace {

constexpr const char* kStyle =
    "<style>\n"
    "body{font-family:system-ui,-apple-system,'Segoe UI',sans-serif;margin:2em auto;max-width:1200px;"
    "padding:0 1em;color:#222}\n"
    "h1{font-size:1.3em}h2{font-size:1.1em;margin-top:1.6em}h2 small{font-weight:normal;color:#666}\n"
    ".summary{font-size:1.1em;background:#fbeaea;border-left:4px solid #c00;padding:.6em 1em;"
    "overflow-wrap:anywhere}\n"
    "p{overflow-wrap:anywhere}\n"
    ".wide{overflow-x:auto;max-width:100%}\n"
    "table{border-collapse:collapse;margin:.4em 0 .8em}\n"
    "th,td{padding:2px 10px;border-bottom:1px solid #e4e4e4;text-align:left;white-space:nowrap}\n"
    "th{background:#f4f4f4}.r{text-align:right;font-variant-numeric:tabular-nums}\n"
    ".mono{font-family:ui-monospace,'DejaVu Sans Mono',monospace}\n"
    "figure{margin:1em 0}svg{max-width:100%;height:auto}\n"
    "article+article{border-top:2px solid #ccc;margin-top:2em}\n"
    "</style>\n";

std::string docBody(const Doc& d, const std::string& svg, bool figure) {
  std::string o;
  o += "<h1>" + xmlEscape(d.heading) + "</h1>\n";
  o += "<p class=\"summary\">" + xmlEscape(d.summary) + "</p>\n";
  if (figure) o += "<figure>\n" + svg + "</figure>\n";
  for (const Section& s : d.sections) {
    o += "<section>\n<h2>" + xmlEscape(s.title);
    if (!s.subtitle.empty()) o += " <small>" + xmlEscape(s.subtitle) + "</small>";
    o += "</h2>\n";
    for (const Block& b : s.blocks) {
      if (const auto* text = std::get_if<std::string>(&b)) {
        o += "<p>" + xmlEscape(*text) + "</p>\n";
        continue;
      }
      const Table& t = std::get<Table>(b);
      auto cls = [&](std::size_t i) {
        std::string c;
        if (i < t.align.size() && t.align[i] == 'r') c = "r";
        if (t.mono.count(i)) c += c.empty() ? "mono" : " mono";
        return c.empty() ? std::string() : " class=\"" + c + "\"";
      };
      o += "<div class=\"wide\"><table>\n<thead><tr>";
      for (std::size_t i = 0; i < t.header.size(); ++i) o += "<th" + cls(i) + ">" + xmlEscape(t.header[i]) + "</th>";
      o += "</tr></thead>\n<tbody>\n";
      for (const auto& r : t.rows) {
        o += "<tr>";
        for (std::size_t i = 0; i < t.header.size(); ++i)
          o += "<td" + cls(i) + ">" + xmlEscape(i < r.size() ? r[i] : "") + "</td>";
        o += "</tr>\n";
      }
      o += "</tbody>\n</table></div>\n";
    }
    o += "</section>\n";
  }
  return o;
}

std::string page(const std::string& title, const std::string& body) {
  return "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>" + xmlEscape(title) +
         "</title>\n" + kStyle + "</head>\n<body>\n" + body + "</body>\n</html>\n";
}

}  // namespace

std::string renderDocHtml(const Doc& d, const std::string& svg) { return page(d.heading, docBody(d, svg, true)); }

std::string renderDocsHtml(const std::string& title, const std::vector<std::pair<Doc, std::string>>& docs) {
  std::string body;
  for (const auto& [d, svg] : docs) body += "<article>\n" + docBody(d, svg, !svg.empty()) + "</article>\n";
  return page(title, body);
}

const char* kindColour(const std::string& kind, std::size_t fallback_index) {
  static const std::map<std::string, const char*> kColours = {
      {"anon", "#4e79a7"},
      {"file", "#76b7b2"},
      {"shmem_mapped", "#59a14f"},
      {"shmem_unmapped", "#edc948"},
      {"pagetables", "#f28e2b"},
      {"sec_pagetables", "#ff9d9a"},
      {"slab_reclaimable", "#b07aa1"},
      {"slab_unreclaimable", "#9c755f"},
      {"kernel_stack", "#e15759"},
      {"sock", "#bab0ac"},
      {"percpu", "#d37295"},
      {"zswap", "#a0cbe8"},
      {"kernel_other", "#8cd17d"},
      {"unattributed", "#d9d9d9"},
  };
  static const std::array<const char*, 4> kSpare = {"#499894", "#86bcb6", "#fabfd2", "#d4a6c8"};
  auto it = kColours.find(kind);
  return it != kColours.end() ? it->second : kSpare[fallback_index % kSpare.size()];
}

std::string num(double v) { return fmt::format("{:.1f}", v); }

// A step with at most about five ticks, "round" in the binary unit the axis is labelled in.
double byteStep(double ymax) {
  double unit = 1;
  for (double u : {1099511627776.0, 1073741824.0, 1048576.0, 1024.0}) {
    if (ymax >= u) {
      unit = u;
      break;
    }
  }
  double raw = ymax / unit / 5;
  double mag = std::pow(10.0, std::floor(std::log10(raw)));
  double norm = raw / mag;
  double nice = norm <= 1 ? 1 : norm <= 2 ? 2 : norm <= 5 ? 5 : 10;
  return nice * mag * unit;
}

double secondsStep(double span) {
  for (double s : {1.0, 2.0, 5.0, 10.0, 15.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0, 3600.0}) {
    if (span / s <= 8) return s;
  }
  return std::ceil(span / 8 / 3600) * 3600;
}

std::string momentSvgElement(const json& rec, bool caption) {
  constexpr double kW = 1000, kLeft = 88, kRight = 900, kBar = 44;
  const json& at = objectAt(rec, "at_kill");
  std::string summary = reportSummary(rec);
  std::vector<std::string> title_lines = caption ? wrapWords(summary, 130) : std::vector<std::string>{};
  const double top = caption ? 28 + 16.0 * static_cast<double>(title_lines.size()) + 14 : 24;
  struct Piece {
    std::string kind;
    bool visible = true;
    double bytes = 0;
  };
  std::vector<Piece> parts;
  double sum = 0;
  for (const json& p : arrayAt(at, "parts")) {
    auto b = numberAt(p, "bytes");
    if (!p.is_object() || !b || *b <= 0) continue;
    parts.push_back({textAt(p, "kind"), flagAt(p, "visible"), *b});
    sum += *b;
  }
  const double usage = numberAt(at, "usage_bytes").value_or(sum);
  const std::optional<double> limit = numberAt(at, "limit_bytes");
  const double scale = std::max({usage, sum, limit.value_or(0.0), 1.0});
  auto px = [&](double b) { return kLeft + b / scale * (kRight - kLeft); };
  const double bar_top = top + 36;
  const double legend_top = bar_top + kBar + 40;
  const std::size_t legend_rows = (parts.size() + 1) / 2;  // two parts a row
  const double height = legend_top + 20.0 * static_cast<double>(legend_rows) + 24;

  std::string o = fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" version=\"1.1\" width=\"{0}\" height=\"{1}\" viewBox=\"0 0 {0} {1}\" "
      "font-family=\"DejaVu Sans, Helvetica, Arial, sans-serif\" font-size=\"12\">\n",
      kW, num(height));
  o += "<title>" + xmlEscape(caption ? summary : "what the kernel charged at the OOM kill") + "</title>\n";
  for (std::size_t i = 0; i < title_lines.size(); ++i)
    o += fmt::format("<text x=\"16\" y=\"{}\">{}</text>\n", num(24 + 16.0 * static_cast<double>(i)),
                     xmlEscape(title_lines[i]));
  std::string cg = textAt(at, "cgroup");
  o += fmt::format("<text x=\"{}\" y=\"{}\" font-weight=\"bold\">at the kill: {} charged to {}</text>\n", kLeft,
                   num(top + 16), xmlEscape(bytesText(usage)), xmlEscape(cg.empty() ? "the machine" : cg));
  if (parts.empty()) {
    o += fmt::format(
        "<text x=\"{}\" y=\"{}\">not known: the text holds neither the domain's statistics nor its usage</text>\n",
        kLeft, num(bar_top + kBar / 2));
  }
  double x = 0;
  for (std::size_t i = 0; i < parts.size(); ++i) {
    const Piece& p = parts[i];
    o += fmt::format(
        "<rect id=\"part-{}\" x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"{}\"{}><title>{} {}</title></rect>\n",
        xmlEscape(p.kind), num(px(x)), num(bar_top), num(std::max(0.5, px(x + p.bytes) - px(x))), num(kBar),
        kindColour(p.kind, i), p.visible ? "" : " fill-opacity=\"0.65\" stroke=\"#333\" stroke-dasharray=\"3 2\"",
        xmlEscape(p.kind), xmlEscape(bytesText(p.bytes)));
    x += p.bytes;
  }
  if (limit) {
    o += fmt::format(
        "<line id=\"limit\" x1=\"{0}\" x2=\"{0}\" y1=\"{1}\" y2=\"{2}\" stroke=\"#c00\" stroke-width=\"2\" "
        "stroke-dasharray=\"6 3\"/>\n<text x=\"{0}\" y=\"{3}\" text-anchor=\"end\" fill=\"#c00\">limit {4}</text>\n",
        num(px(*limit)), num(bar_top - 8), num(bar_top + kBar + 8), num(bar_top + kBar + 22),
        xmlEscape(bytesText(*limit)));
  }
  for (std::size_t i = 0; i < parts.size(); ++i) {
    const Piece& p = parts[i];
    const std::size_t row = i / 2;
    double lx = kLeft + (i % 2 == 0 ? 0 : 420), ly = legend_top + 20.0 * static_cast<double>(row);
    o += fmt::format("<rect x=\"{}\" y=\"{}\" width=\"12\" height=\"12\" fill=\"{}\"/>\n", num(lx), num(ly - 10),
                     kindColour(p.kind, i));
    o += fmt::format("<text x=\"{}\" y=\"{}\">{} {} ({:.1f}%, {})</text>\n", num(lx + 18), num(ly), xmlEscape(p.kind),
                     xmlEscape(bytesText(p.bytes)), usage > 0 ? 100.0 * p.bytes / usage : 0.0,
                     p.visible ? "visible" : "invisible to any process");
  }
  o += "</svg>\n";
  return o;
}

std::string svgElement(const json& rec, bool caption) {
  constexpr double kW = 1000;
  std::string summary = reportSummary(rec);
  // Standing alone the picture carries its sentence; in the page the sentence is said above it.
  std::vector<std::string> title_lines = caption ? wrapWords(summary, 130) : std::vector<std::string>{};
  const double top = caption ? 28 + 16.0 * static_cast<double>(title_lines.size()) + 14 : 24;
  const double height = top + 456;
  const double left = 88, right = kW - 250, bottom = height - 56;

  Flight f = readFlight(rec);
  Domain d = domainOf(rec);
  std::optional<double> limit;
  if (d.limit) limit = static_cast<double>(*d.limit);
  if (!limit) {
    for (auto it = f.limit.rbegin(); it != f.limit.rend(); ++it) {
      if (*it) {
        limit = **it;
        break;
      }
    }
  }
  const std::size_t n = f.t.size();
  std::vector<double> total(n, 0.0);
  for (const auto& k : f.kinds) {
    for (std::size_t i = 0; i < n; ++i) total[i] += f.parts[k][i];
  }
  double ymax = 0;
  for (double v : total) ymax = std::max(ymax, v);
  for (const auto* series : {&f.usage, &f.self, &f.limit}) {
    for (const auto& v : *series) {
      if (v) ymax = std::max(ymax, *v);
    }
  }
  if (limit) ymax = std::max(ymax, *limit);
  if (d.usage) ymax = std::max(ymax, static_cast<double>(*d.usage));
  if (ymax <= 0) ymax = 1048576;
  ymax *= 1.05;
  const double ystep = byteStep(ymax);
  ymax = std::ceil(ymax / ystep) * ystep;

  // The axis spans the data it has (4 s of points fill the width, not a sliver of the recorder's
  // minute), at least a second; with no points, the recorder's window.
  double window = n > 0 ? std::max(1.0, -f.t.front()) : f.window.value_or(60);
  if (window <= 0) window = 60;
  double xmin = -window - (n > 1 ? 0.03 * window : 0.0);
  double xmax = n > 0 ? std::max(0.0, f.t.back()) : 0.0;
  xmax += (xmax - xmin) * 0.02;
  auto px = [&](double t) { return left + (t - xmin) / (xmax - xmin) * (right - left); };
  auto py = [&](double b) { return bottom - b / ymax * (bottom - top); };

  std::string o;
  o += fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" version=\"1.1\" width=\"{0}\" height=\"{1}\" viewBox=\"0 0 {0} {1}\" "
      "font-family=\"DejaVu Sans, Helvetica, Arial, sans-serif\" font-size=\"12\">\n",
      kW, height);
  // A tooltip: the sentence itself standing alone, what the picture is in the page (which says
  // the sentence above it).
  o += "<title>" + xmlEscape(caption ? summary : "memory of the cgroup before the OOM kill") + "</title>\n";
  std::string cg = f.cgroup.empty() ? recordCgroup(rec) : f.cgroup;
  o += "<desc>" +
       xmlEscape(
           fmt::format("Memory of {} in the last {} before the OOM kill, stacked by part, with the limit and the kill; "
                       "drawn by headroom report{}.",
                       cg.empty() ? "the cgroup" : cg, secondsText(window),
                       intAt(rec, "id") ? fmt::format(" from journal record {}", *intAt(rec, "id")) : "")) +
       "</desc>\n";
  o += fmt::format("<rect x=\"0\" y=\"0\" width=\"{}\" height=\"{}\" fill=\"#ffffff\"/>\n", kW, height);
  if (caption) {
    o += "<g id=\"summary\" font-size=\"13\" fill=\"#222222\">\n";
    for (std::size_t i = 0; i < title_lines.size(); ++i)
      o += fmt::format("<text x=\"16\" y=\"{}\">{}</text>\n", num(24 + 16.0 * static_cast<double>(i)),
                       xmlEscape(title_lines[i]));
    o += "</g>\n";
  }

  // Grid and axes.
  o += "<g id=\"y-axis\" fill=\"#444444\">\n";
  const auto yticks = static_cast<int>(std::llround(ymax / ystep));
  for (int i = 0; i <= yticks; ++i) {
    double b = i * ystep;
    double y = py(b);
    o += fmt::format("<line x1=\"{}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" stroke=\"#e3e3e3\" stroke-width=\"1\"/>\n",
                     num(left), num(y), num(right), num(y));
    o += fmt::format("<text class=\"ytick\" x=\"{}\" y=\"{}\" dy=\"4\" text-anchor=\"end\">{}</text>\n", num(left - 6),
                     num(y), xmlEscape(bytesText(b)));
  }
  o += fmt::format("<text x=\"16\" y=\"{}\" transform=\"rotate(-90 16 {})\" text-anchor=\"middle\">bytes</text>\n",
                   num((top + bottom) / 2), num((top + bottom) / 2));
  o += "</g>\n<g id=\"x-axis\" fill=\"#444444\">\n";
  double xstep = secondsStep(xmax - xmin);
  const auto xticks = static_cast<int>(std::floor(-xmin / xstep + 1e-9));
  for (int i = 0; i <= xticks; ++i) {
    double t = -i * xstep;
    double x = px(t);
    o += fmt::format("<line x1=\"{0}\" y1=\"{1}\" x2=\"{0}\" y2=\"{2}\" stroke=\"#999999\" stroke-width=\"1\"/>\n",
                     num(x), num(bottom), num(bottom + 5));
    o += fmt::format("<text class=\"xtick\" x=\"{}\" y=\"{}\" text-anchor=\"middle\">{}</text>\n", num(x),
                     num(bottom + 18), t == 0 ? std::string("0") : fmt::format("{:g} s", t));
  }
  o += fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">seconds before the kill</text>\n",
                   num((left + right) / 2), num(bottom + 38));
  o += "</g>\n";

  // The stacked parts: each kind between the running total below it and that total plus itself.
  o += "<g id=\"parts\" stroke=\"none\">\n";
  std::vector<double> below(n, 0.0);
  for (std::size_t ki = 0; ki < f.kinds.size(); ++ki) {
    const std::string& k = f.kinds[ki];
    const auto& v = f.parts[k];
    std::vector<double> xs, lo, hi;
    for (std::size_t i = 0; i < n; ++i) {
      xs.push_back(px(f.t[i]));
      lo.push_back(below[i]);
      hi.push_back(below[i] + v[i]);
    }
    if (n == 1) {  // one sample: a narrow bar, an area needs two
      xs = {xs[0] - 3, xs[0] + 3};
      lo = {lo[0], lo[0]};
      hi = {hi[0], hi[0]};
    }
    std::string path;
    for (std::size_t i = 0; i < xs.size(); ++i)
      path += fmt::format("{}{} {} ", i == 0 ? "M" : "L", num(xs[i]), num(py(hi[i])));
    for (std::size_t i = xs.size(); i-- > 0;) path += fmt::format("L{} {} ", num(xs[i]), num(py(lo[i])));
    path += "Z";
    o += fmt::format("<path class=\"part\" fill=\"{}\" fill-opacity=\"0.85\" d=\"{}\"><title>{}</title></path>\n",
                     kindColour(k, ki), path, xmlEscape(k));
    for (std::size_t i = 0; i < n; ++i) below[i] += v[i];
  }
  o += "</g>\n";

  auto polyline = [&](const char* id, const std::vector<std::optional<double>>& series, const char* stroke,
                      const char* dash) {
    std::vector<std::pair<double, double>> pts;
    for (std::size_t i = 0; i < n; ++i) {
      if (series[i]) pts.emplace_back(px(f.t[i]), py(*series[i]));
    }
    if (pts.empty()) return false;
    if (pts.size() == 1) pts.emplace_back(pts[0].first + 3, pts[0].second);  // one sample: a short stroke
    std::string text;
    for (const auto& [x, y] : pts) {
      if (!text.empty()) text += ' ';
      text += num(x);
      text += ',';
      text += num(y);
    }
    o += fmt::format("<polyline id=\"{}\" fill=\"none\" stroke=\"{}\" stroke-width=\"1.6\"{} points=\"{}\"/>\n", id,
                     stroke, dash[0] ? fmt::format(" stroke-dasharray=\"{}\"", dash) : std::string(), text);
    return true;
  };
  bool have_usage = polyline("usage", f.usage, "#222222", "");
  bool have_self = polyline("self-reported", f.self, "#7b3294", "5 3");

  if (n == 0) {
    o += fmt::format(
        "<text id=\"no-samples\" x=\"{}\" y=\"{}\" text-anchor=\"middle\" fill=\"#666666\">no samples of this cgroup "
        "before the kill: the flight recorder kept none</text>\n",
        num((left + right) / 2), num((top + bottom) / 2));
  }

  o += fmt::format("<line x1=\"{0}\" y1=\"{1}\" x2=\"{0}\" y2=\"{2}\" stroke=\"#444444\" stroke-width=\"1\"/>\n",
                   num(left), num(top), num(bottom));
  o += fmt::format("<line x1=\"{0}\" y1=\"{2}\" x2=\"{1}\" y2=\"{2}\" stroke=\"#444444\" stroke-width=\"1\"/>\n",
                   num(left), num(right), num(bottom));

  std::string domain_name = d.global ? "the machine" : d.cgroup.empty() ? cg : d.cgroup;
  if (limit) {
    double y = py(*limit);
    o += fmt::format(
        "<line id=\"limit\" x1=\"{}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" stroke=\"#cc0000\" stroke-width=\"2\"/>\n",
        num(left), num(y), num(right), num(y));
    o += fmt::format(
        "<text id=\"limit-label\" x=\"{}\" y=\"{}\" text-anchor=\"start\" fill=\"#cc0000\">limit {}{}</text>\n",
        num(left + 6), num(y - 6), xmlEscape(bytesText(*limit)),
        xmlEscape(domain_name.empty() ? "" : " (" + domain_name + ")"));
  } else {
    o += fmt::format("<text id=\"limit-unknown\" x=\"{}\" y=\"{}\" fill=\"#cc0000\">limit not known</text>\n",
                     num(left + 6), num(top + 14));
  }

  // The kill: at 0 on the time axis, with what the kernel charged then.
  double kx = px(0);
  std::string victims;
  {
    std::vector<std::string> names;
    for (const Task& t : victimsOf(rec)) names.push_back(who(t));
    victims = names.empty() ? "victim not known" : joinList(names);
  }
  auto kt = recordTime(rec);
  o += fmt::format(
      "<line id=\"kill\" x1=\"{0}\" y1=\"{1}\" x2=\"{0}\" y2=\"{2}\" stroke=\"#cc0000\" stroke-width=\"2\" "
      "stroke-dasharray=\"6 4\"/>\n",
      num(kx), num(top), num(bottom));
  o += fmt::format(
      "<text id=\"kill-label\" x=\"{}\" y=\"{}\" text-anchor=\"end\" fill=\"#cc0000\">OOM kill of {}{}</text>\n",
      num(kx - 6), num(top + 14), xmlEscape(victims), xmlEscape(kt ? " at " + utcTime(*kt, true) : ""));
  if (d.usage) {
    o += fmt::format(
        "<circle id=\"kill-usage\" cx=\"{}\" cy=\"{}\" r=\"4\" fill=\"#cc0000\"><title>{}</title></circle>\n", num(kx),
        num(py(static_cast<double>(*d.usage))),
        xmlEscape(fmt::format("{} at the kill: {} charged", domain_name.empty() ? "the cgroup" : domain_name,
                              formatBytes(*d.usage))));
  }
  // The stack is the record's cgroup; when the limit was hit higher up, say whose the line is.
  if (!d.global && !d.cgroup.empty() && !cg.empty() && d.cgroup != cg) {
    o += fmt::format(
        "<text id=\"domain-note\" x=\"{}\" y=\"{}\" fill=\"#cc0000\">the parts are {}'s; the limit and the kill's "
        "usage are its OOM domain {}'s</text>\n",
        num(left), num(height - 8), xmlEscape(cg), xmlEscape(d.cgroup));
  }

  // Legend.
  double lx = right + 18, ly = top;
  o += "<g id=\"legend\" fill=\"#222222\">\n";
  auto entry = [&](const std::string& swatch, const std::string& label) {
    o += swatch;
    o += fmt::format("<text x=\"{}\" y=\"{}\">{}</text>\n", num(lx + 20), num(ly + 10), xmlEscape(label));
    ly += 18;
  };
  for (std::size_t ki = f.kinds.size(); ki-- > 0;) {  // top of the stack first, as drawn
    const std::string& k = f.kinds[ki];
    auto vis = kindVisible(k);
    entry(fmt::format("<rect x=\"{}\" y=\"{}\" width=\"14\" height=\"12\" fill=\"{}\" fill-opacity=\"0.85\"/>\n",
                      num(lx), num(ly), kindColour(k, ki)),
          k + (vis ? (*vis ? " (visible)" : " (invisible)") : ""));
  }
  auto lineSwatch = [&](const char* stroke, const char* dash) {
    return fmt::format("<line x1=\"{}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" stroke=\"{}\" stroke-width=\"2\"{}/>\n", num(lx),
                       num(ly + 6), num(lx + 14), num(ly + 6), stroke,
                       dash[0] ? fmt::format(" stroke-dasharray=\"{}\"", dash) : "");
  };
  if (have_usage) entry(lineSwatch("#222222", ""), "usage (charged)");
  if (have_self) entry(lineSwatch("#7b3294", "5 3"), "the prover's own count");
  if (limit) entry(lineSwatch("#cc0000", ""), "limit");
  entry(lineSwatch("#cc0000", "6 4"), "the OOM kill");
  o += "</g>\n";
  o += "</svg>\n";
  return o;
}

}  // namespace report_detail

std::string renderReportSvg(const nlohmann::json& record) {
  return "<?xml version=\"1.0\" encoding=\"UTF-8\" standalone=\"no\"?>\n" + report_detail::svgElement(record, true);
}

}  // namespace headroom
