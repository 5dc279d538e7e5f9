// docs/configuration.md against the config parser: every key of configKeys() is documented with
// its flag, type and default, every documented key exists, and each documented default, parsed
// by the real loader, gives the value the code defaults to.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "headroom/config/config.h"

namespace headroom {
namespace {

const std::string kDoc = std::string(HEADROOM_DOCS_DIR) + "/configuration.md";
constexpr std::string_view kHeader = "| key | flag | type | default | allowed | meaning |";

struct DocKey {
  std::string flag;
  std::string type;
  std::string default_value;  // TOML, as written in the file
  std::string line;           // for messages
};

std::string readDoc() {
  std::ifstream in(kDoc);
  if (!in) throw std::runtime_error("cannot open " + kDoc);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string trimmed(std::string_view s) {
  const auto b = s.find_first_not_of(' ');
  const auto e = s.find_last_not_of(' ');
  return b == std::string_view::npos ? std::string() : std::string(s.substr(b, e - b + 1));
}

// Cells of a Markdown table row; "\|" is a literal bar inside a cell.
std::vector<std::string> splitCells(std::string_view line) {
  std::vector<std::string> cells;
  std::string cell;
  for (std::size_t i = 1; i < line.size(); ++i) {  // past the leading '|'
    if (line[i] == '\\' && i + 1 < line.size() && line[i + 1] == '|') {
      cell += '|';
      ++i;
    } else if (line[i] == '|') {
      cells.push_back(trimmed(cell));
      cell.clear();
    } else {
      cell += line[i];
    }
  }
  return cells;
}

// "`x`" -> "x"; anything else is an error naming the row.
std::string code(const std::string& cell, const std::string& line) {
  if (cell.size() < 2 || cell.front() != '`' || cell.back() != '`' || cell.find('`', 1) != cell.size() - 1)
    throw std::runtime_error(fmt::format("cell \"{}\" is not one `code` span in: {}", cell, line));
  return cell.substr(1, cell.size() - 2);
}

// Every row of every key table: | `name` | `--flag` | type | `default` | allowed | meaning |.
std::map<std::string, DocKey> readKeyTables(const std::string& doc) {
  std::map<std::string, DocKey> rows;
  bool in_table = false;
  std::istringstream in(doc);
  std::string line;
  while (std::getline(in, line)) {
    if (line == kHeader) {
      in_table = true;
      continue;
    }
    if (!in_table) continue;
    if (!line.starts_with("|")) {
      in_table = false;  // the table ends
      continue;
    }
    if (line.starts_with("| ---")) continue;
    const std::vector<std::string> cells = splitCells(line);
    if (cells.size() != 6) throw std::runtime_error("key row without 6 cells: " + line);
    DocKey k{code(cells[1], line), cells[2], code(cells[3], line), line};
    if (!rows.emplace(code(cells[0], line), k).second) throw std::runtime_error("key listed twice: " + line);
  }
  return rows;
}

// A TOML document that sets one key: "[sensors]\nbpf = true\n" for "sensors.bpf".
std::string tomlSetting(const std::string& name, const std::string& value) {
  auto dot = name.find('.');
  if (dot == std::string::npos) return fmt::format("{} = {}\n", name, value);
  return fmt::format("[{}]\n{} = {}\n", name.substr(0, dot), name.substr(dot + 1), value);
}

TEST(ConfigDocs, EveryKeyIsDocumentedWithItsFlagAndType) {
  const auto doc = readKeyTables(readDoc());
  ASSERT_FALSE(doc.empty()) << "no table headed \"" << kHeader << "\" in " << kDoc;
  for (const ConfigKey& k : configKeys()) {
    auto it = doc.find(k.name);
    if (it == doc.end()) {
      ADD_FAILURE() << k.name << " (" << k.flag << ") is a config key but not in docs/configuration.md";
      continue;
    }
    EXPECT_EQ(it->second.flag, k.flag) << "flag of " << k.name;
    EXPECT_EQ(it->second.type, k.kind) << "type of " << k.name;
  }
}

TEST(ConfigDocs, EveryDocumentedKeyExists) {
  for (const auto& [name, row] : readKeyTables(readDoc())) {
    bool known = false;
    for (const ConfigKey& k : configKeys()) known = known || k.name == name;
    EXPECT_TRUE(known) << name << " is in docs/configuration.md but the parser has no such key: " << row.line;
  }
}

TEST(ConfigDocs, DocumentedDefaultsAreTheParsersDefaults) {
  const AgentConfig defaults;
  for (const auto& [name, row] : readKeyTables(readDoc())) {
    auto want = configValue(defaults, name);
    if (!want) {
      ADD_FAILURE() << want.error().describe();
      continue;
    }
    // The documented default, set in a file of its own and read by the real loader, must give
    // the value the code starts from.
    const std::string toml = tomlSetting(name, row.default_value);
    auto parsed = parseAgentConfig(toml, "docs/configuration.md");
    if (!parsed) {
      // "" means "none" for some string keys whose parser refuses an empty value; then the
      // code's default must be empty too.
      if (row.default_value == "\"\"") {
        EXPECT_EQ(*want, "\"\"") << name << ": documented default \"\" (none)";
        continue;
      }
      ADD_FAILURE() << name << ": the documented default `" << row.default_value
                    << "` is refused: " << parsed.error().describe();
      continue;
    }
    auto got = configValue(*parsed, name);
    ASSERT_TRUE(got) << got.error().describe();
    EXPECT_EQ(*got, *want) << name << ": documented default `" << row.default_value << "`, the code's is " << *want;
  }
}

TEST(ConfigDocs, EveryKeyHasAValue) {
  const AgentConfig defaults;
  for (const ConfigKey& k : configKeys()) {
    auto v = configValue(defaults, k.name);
    EXPECT_TRUE(v) << k.name << ": configValue() does not know it";
  }
  EXPECT_FALSE(configValue(defaults, "no_such_key"));
}

// Every ```toml block of the page is a valid configuration file.
TEST(ConfigDocs, ExamplesParse) {
  const std::string doc = readDoc();
  std::size_t blocks = 0;
  for (std::size_t at = doc.find("```toml\n"); at != std::string::npos; at = doc.find("```toml\n", at)) {
    at += 8;
    auto end = doc.find("\n```", at);
    ASSERT_NE(end, std::string::npos) << "unterminated ```toml block";
    const std::string block = doc.substr(at, end - at + 1);
    auto parsed = parseAgentConfig(block, "docs/configuration.md");
    EXPECT_TRUE(parsed) << parsed.error().describe() << "\n" << block;
    ++blocks;
    at = end;
  }
  EXPECT_GE(blocks, 1u) << "no ```toml example in docs/configuration.md";
}

// The block that says it holds every key at its default does.
TEST(ConfigDocs, TheDefaultsFileIsTheDefaults) {
  const std::string doc = readDoc();
  constexpr std::string_view kMarker = "```toml\n# Every key at its default";
  auto at = doc.find(kMarker);
  ASSERT_NE(at, std::string::npos) << "no block starting \"# Every key at its default\" in docs/configuration.md";
  at += 8;
  const std::string block = doc.substr(at, doc.find("\n```", at) - at + 1);
  auto parsed = parseAgentConfig(block, "docs/configuration.md");
  ASSERT_TRUE(parsed) << parsed.error().describe();
  const AgentConfig defaults;
  for (const ConfigKey& k : configKeys()) {
    auto got = configValue(*parsed, k.name);
    auto want = configValue(defaults, k.name);
    ASSERT_TRUE(got && want) << k.name;
    EXPECT_EQ(*got, *want) << k.name << " in the defaults file";
  }
}

}  // namespace
}  // namespace headroom
