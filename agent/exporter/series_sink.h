// The series of one update, kept from one update to the next, and the page written from them.
// Private to agent/exporter.
//
// The catalogue is prometheus-cpp's families here (one family each, one ClientMetric per series,
// labels in name order), published once per update for TextSerializer to write the page at the
// first scrape after it. Each series is an object of its own, shared: a series set again to the
// value it had is the same object in the next update's list (its labels are not built again, the
// list is not copied), one set to another value is copied first where a published list still
// holds it (copy on write), one not set in an update is taken out when the update ends, and a
// family's series are sorted by labels again only when some came or went. The page keeps the
// text of every series whose object is the same as at the last page: an update that changed a
// few values of a family of a thousand series has a few lines written anew, not the family.
#pragma once

#include <prometheus/client_metric.h>
#include <prometheus/metric_family.h>

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "headroom/exporter/exporter.h"

namespace headroom::exporter_detail {

// The catalogue's entry for a family the code is about to fill: a name missing from it is a
// programming error (asserted in debug builds; the family is left out otherwise).
const MetricInfo* infoOf(std::string_view name);

// The labels every series about a cgroup starts with (the catalogue's kCgroupLabels): its path
// and what operators call it.
struct CgroupLabels {
  std::string_view path, unit, container, pod, pod_namespace;
};

// One family as an update published it: its series in label order, each shared with the
// updates (and the pages) that did not change it.
struct PublishedFamily {
  const MetricInfo* info = nullptr;
  std::vector<std::shared_ptr<const prometheus::ClientMetric>> series;
};
using Families = std::vector<std::shared_ptr<const PublishedFamily>>;

// Adds series under a budget; what does not fit is counted, not added. In counting mode (a
// cgroup or process left out by a cap) every series is counted only.
class SeriesSink {
 public:
  SeriesSink();

  // A new update: every series unset, `budget` series to come.
  void begin(std::size_t budget);

  // One series of the family `name`, label values in the catalogue's label order.
  void add(std::string_view name, std::initializer_list<std::string_view> values, double value) {
    put(name, values.begin(), values.size(), value, false);
  }
  // One series of a family whose labels start with a cgroup's (kCgroupLabels): those, then `rest`.
  void add(std::string_view name, const CgroupLabels& cg, std::initializer_list<std::string_view> rest, double value);
  void add(std::string_view name, const CgroupLabels& cg, double value) { add(name, cg, {}, value); }
  // A series outside the budget (the reserved accounting series).
  void addReserved(std::string_view name, double value) { put(name, nullptr, 0, value, true); }

  void setCountingOnly(bool on) { counting_only_ = on; }
  std::size_t added() const { return added_; }
  std::size_t dropped() const { return dropped_; }

  // Ends the update: the series it did not set are taken out, and each family's series are in
  // order of their labels, so that a page reads (and diffs) the same from one scrape to the next.
  void end();

  // The families with series in the update that last ended, in catalogue order, each the same
  // object as in the last update's list where this one changed nothing in it.
  Families publish();

 private:
  struct Slot {
    std::size_t at = 0;            // in the family's series
    std::uint64_t generation = 0;  // the update that last set it
  };
  struct Family {
    const MetricInfo* info = nullptr;
    std::vector<std::size_t> label_order;  // label indices by name, as the exposition sorts them
    // Made writable by the sink, published as they are: one is written in place only while no
    // published list or page holds it.
    std::vector<std::shared_ptr<const prometheus::ClientMetric>> series;
    // A series' label values (in label_order, each ended by '\0') -> its slot.
    std::unordered_map<std::string, Slot> index;
    bool sorted = true;                                // `series` by labels, and every slot's place in it
    std::size_t set = 0;                               // series set in this update
    bool changed = false;                              // a series added, dropped or set to another value in this update
    std::shared_ptr<const PublishedFamily> published;  // publish()'s list of `series`
  };

  void put(std::string_view name, const std::string_view* values, std::size_t n, double value, bool reserved);
  static std::shared_ptr<const prometheus::ClientMetric> seriesOf(const Family& f, std::string_view key);
  void dropUnset(Family& f);
  void sortSeries(Family& f);

  std::size_t budget_ = 0;
  std::size_t added_ = 0;
  std::size_t dropped_ = 0;
  bool counting_only_ = false;
  std::uint64_t generation_ = 0;
  std::vector<Family> families_;  // by rank in the catalogue
  std::string key_;               // the series being added, reused
};

// The page of the published families, written by prometheus-cpp's TextSerializer series by
// series: each series' text kept from the last page while its object stays the same.
class PageText {
 public:
  // Writes the page of `families` (the last page's texts reused where they can be).
  void write(const Families& families);
  const std::string& page() const { return page_; }

 private:
  struct FamilyText {
    std::shared_ptr<const PublishedFamily> family;
    std::string header;  // HELP and TYPE
    std::vector<std::pair<std::shared_ptr<const prometheus::ClientMetric>, std::string>> lines;
  };
  std::vector<FamilyText> texts_;  // in the families' order
  std::string page_;
};

// TextSerializer's text of one family of the catalogue with these series: HELP, TYPE and a line
// for each.
std::string familyText(const MetricInfo& info, std::vector<prometheus::ClientMetric> series);

}  // namespace headroom::exporter_detail
