#include "series_sink.h"

#include <prometheus/metric_type.h>
#include <prometheus/text_serializer.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cassert>
#include <sstream>

#include "headroom/util/text.h"

namespace headroom::exporter_detail {
namespace {

prometheus::MetricType exposedType(MetricType t) {
  return t == MetricType::kCounter ? prometheus::MetricType::Counter : prometheus::MetricType::Gauge;
}

// TextSerializer's text of the families, into a buffer of `size_hint` bytes (a stream that grows
// as it goes costs more than the serializing).
std::string pageOf(const std::vector<prometheus::MetricFamily>& families, std::size_t size_hint) {
  std::string buffer;
  buffer.reserve(size_hint);
  std::ostringstream out(std::move(buffer));
  prometheus::TextSerializer().Serialize(out, families);
  return std::move(out).str();
}

// A family of the catalogue with no series: what TextSerializer writes before them.
prometheus::MetricFamily emptyFamily(const MetricInfo& info) {
  prometheus::MetricFamily f;
  f.name = info.name;
  f.help = info.help;  // written as it is: the catalogue's help has nothing to escape
  f.type = exposedType(info.type);
  return f;
}

}  // namespace

std::string familyText(const MetricInfo& info, std::vector<prometheus::ClientMetric> series) {
  std::vector<prometheus::MetricFamily> one(1, emptyFamily(info));
  one[0].metric = std::move(series);
  return pageOf(one, 256 + 128 * one[0].metric.size());
}

namespace {

// TextSerializer's lines for `series` of the family `info` (one line each: a counter's or a
// gauge's sample line, its label values escaped), without the family's HELP and TYPE.
std::vector<std::string> linesOf(const MetricInfo& info, std::vector<prometheus::ClientMetric> series) {
  const std::size_t n = series.size();
  const std::string text = familyText(info, std::move(series));
  std::vector<std::string> lines;
  lines.reserve(n);
  std::size_t at = 0;
  while (at < text.size()) {
    std::size_t end = text.find('\n', at);
    end = end == std::string::npos ? text.size() : end + 1;
    if (text[at] != '#') lines.emplace_back(text, at, end - at);
    at = end;
  }
  assert(lines.size() == n && "one line a series");
  return lines;
}

}  // namespace

const MetricInfo* infoOf(std::string_view name) {
  const MetricInfo* info = findMetric(name);
  assert(info != nullptr && "metric family missing from metricCatalog()");
  return info;
}

SeriesSink::SeriesSink() : families_(metricCatalog().size()) {
  for (std::size_t rank = 0; rank < families_.size(); ++rank) {
    const MetricInfo& info = metricCatalog()[rank];
    Family& f = families_[rank];
    f.info = &info;
    f.label_order.resize(info.labels.size());
    for (std::size_t i = 0; i < f.label_order.size(); ++i) f.label_order[i] = i;
    std::sort(f.label_order.begin(), f.label_order.end(),
              [&](std::size_t a, std::size_t b) { return info.labels[a] < info.labels[b]; });
  }
}

void SeriesSink::begin(std::size_t budget) {
  budget_ = budget;
  added_ = dropped_ = 0;
  counting_only_ = false;
  ++generation_;
  for (Family& f : families_) {
    f.set = 0;
    f.changed = false;
  }
}

void SeriesSink::add(std::string_view name, const CgroupLabels& cg, std::initializer_list<std::string_view> rest,
                     double value) {
  std::array<std::string_view, 8> values{cg.path, cg.unit, cg.container, cg.pod, cg.pod_namespace};
  std::size_t n = 5;
  for (std::string_view v : rest) {
    if (n == values.size()) return;
    values[n++] = v;
  }
  put(name, values.data(), n, value, false);
}

void SeriesSink::end() {
  for (Family& f : families_) {
    if (f.set < f.series.size()) dropUnset(f);
    if (!f.sorted) sortSeries(f);
  }
}

Families SeriesSink::publish() {
  Families out;
  out.reserve(families_.size());
  for (Family& f : families_) {
    if (f.series.empty()) {
      f.published.reset();
      continue;
    }
    if (f.changed || !f.published) {
      auto p = std::make_shared<PublishedFamily>();
      p->info = f.info;
      p->series = f.series;
      f.published = std::move(p);
    }
    out.push_back(f.published);
  }
  return out;
}

void SeriesSink::put(std::string_view name, const std::string_view* values, std::size_t n, double value,
                     bool reserved) {
  const MetricInfo* info = infoOf(name);
  if (info == nullptr) return;
  assert(n == info->labels.size() && "label values do not match the catalogue");
  if (n != info->labels.size()) return;
  if (counting_only_ || (!reserved && added_ >= budget_)) {
    ++dropped_;
    return;
  }
  Family& f = families_[static_cast<std::size_t>(info - metricCatalog().data())];
  key_.clear();
  for (std::size_t i : f.label_order) {
    const std::string_view v = values[i];
    if (isPrintableAscii(v))
      key_ += v;
    else
      key_ += printableText(v);
    key_ += '\0';
  }
  auto [it, inserted] = f.index.try_emplace(key_);
  Slot& slot = it->second;
  if (inserted) {
    slot.at = f.series.size();
    f.series.push_back(seriesOf(f, key_));
    f.sorted = false;
    f.changed = true;
  }
  if (slot.generation != generation_) {
    slot.generation = generation_;
    ++f.set;
    ++added_;
  } else if (info->type == MetricType::kCounter) {
    return;  // a counter is set once per update; a gauge set twice keeps the last value
  }
  std::shared_ptr<const prometheus::ClientMetric>& m = f.series[slot.at];
  const bool counter = info->type == MetricType::kCounter;
  // Bit for bit: a NaN is "unchanged" when it was NaN before too.
  if (std::bit_cast<std::uint64_t>(counter ? m->counter.value : m->gauge.value) == std::bit_cast<std::uint64_t>(value))
    return;
  // A published list (or a page's text) still holds it: that one stays as it was. Every series
  // is made here, not const: the one no one else holds is written in place.
  std::shared_ptr<prometheus::ClientMetric> w = m.use_count() > 1
                                                    ? std::make_shared<prometheus::ClientMetric>(*m)
                                                    : std::const_pointer_cast<prometheus::ClientMetric>(m);
  (counter ? w->counter.value : w->gauge.value) = value;
  m = std::move(w);
  f.changed = true;
}

std::shared_ptr<const prometheus::ClientMetric> SeriesSink::seriesOf(const Family& f, std::string_view key) {
  auto m = std::make_shared<prometheus::ClientMetric>();
  m->label.reserve(f.label_order.size());
  for (std::size_t i : f.label_order) {
    const std::size_t end = key.find('\0');
    m->label.push_back({f.info->labels[i], std::string(key.substr(0, end))});
    key.remove_prefix(end + 1);
  }
  return m;
}

void SeriesSink::dropUnset(Family& f) {
  std::vector<bool> gone(f.series.size(), false);
  std::erase_if(f.index, [&](const auto& kv) {
    if (kv.second.generation == generation_) return false;
    gone[kv.second.at] = true;
    return true;
  });
  std::size_t kept = 0;
  for (std::size_t i = 0; i < f.series.size(); ++i) {
    if (gone[i]) continue;
    if (kept != i) f.series[kept] = std::move(f.series[i]);
    ++kept;
  }
  f.series.erase(f.series.begin() + static_cast<std::ptrdiff_t>(kept), f.series.end());
  f.sorted = false;  // the slots' places moved
  f.changed = true;
}

void SeriesSink::sortSeries(Family& f) {
  std::sort(f.series.begin(), f.series.end(), [](const auto& a, const auto& b) { return a->label < b->label; });
  for (std::size_t i = 0; i < f.series.size(); ++i) {
    key_.clear();
    for (const prometheus::ClientMetric::Label& l : f.series[i]->label) {
      key_ += l.value;
      key_ += '\0';
    }
    const auto it = f.index.find(key_);
    assert(it != f.index.end() && "every series has its slot");
    if (it != f.index.end()) it->second.at = i;
  }
  f.sorted = true;
}

void PageText::write(const Families& families) {
  std::vector<FamilyText> next;
  next.reserve(families.size());
  std::size_t old = 0;  // families come in catalogue order: the last page's are walked alongside
  for (const auto& family : families) {
    FamilyText* before = nullptr;
    for (std::size_t j = old; j < texts_.size(); ++j) {
      if (texts_[j].family->info != family->info) continue;
      before = &texts_[j];
      old = j + 1;
      break;
    }
    if (before != nullptr && before->family == family) {
      next.push_back(std::move(*before));
      continue;
    }
    FamilyText& t = next.emplace_back();
    t.family = family;
    t.header = before != nullptr ? std::move(before->header) : familyText(*family->info, {});
    t.lines.reserve(family->series.size());
    // The series whose objects were on the last page keep their text (both lists are in label
    // order); the others are written together, then put in their places.
    std::vector<std::size_t> fresh;
    std::size_t k = 0;
    for (const auto& s : family->series) {
      std::string text;
      if (before != nullptr) {
        auto& lines = before->lines;
        while (k < lines.size() && lines[k].first != s && lines[k].first->label < s->label) ++k;
        if (k < lines.size() && lines[k].first == s) text = std::move(lines[k++].second);
      }
      if (text.empty()) fresh.push_back(t.lines.size());
      t.lines.emplace_back(s, std::move(text));
    }
    if (fresh.empty()) continue;
    std::vector<prometheus::ClientMetric> series;
    series.reserve(fresh.size());
    for (std::size_t i : fresh) series.push_back(*t.lines[i].first);
    std::vector<std::string> lines = linesOf(*family->info, std::move(series));
    for (std::size_t i = 0; i < fresh.size() && i < lines.size(); ++i) t.lines[fresh[i]].second = std::move(lines[i]);
  }
  texts_ = std::move(next);
  std::size_t size = 0;
  for (const FamilyText& t : texts_) {
    size += t.header.size();
    for (const auto& l : t.lines) size += l.second.size();
  }
  page_.clear();
  page_.reserve(size);
  for (const FamilyText& t : texts_) {
    page_ += t.header;
    for (const auto& l : t.lines) page_ += l.second;
  }
}

}  // namespace headroom::exporter_detail
