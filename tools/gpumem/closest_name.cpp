// The closest-name suggestion for unknown options, commands and values.
#include "closest_name.hpp"

#include <algorithm>
#include <numeric>

namespace gpumem::tool {
namespace {

std::string_view without_dashes(std::string_view word)
{
  return word.substr(std::min(word.find_first_not_of('-'), word.size()));
}

/// `word` abbreviates or extends `name` by at least two letters of its own.
bool abbreviates_or_extends(std::string_view word, std::string_view name)
{
  if (without_dashes(word).size() < 2 || without_dashes(name).size() < 2) { return false; }
  return name.starts_with(word) || word.starts_with(name);
}

}  // namespace

std::size_t edit_distance(std::string_view a, std::string_view b)
{
  // Rows i-2, i-1 and i of the optimal string alignment table; row[j]: edits of a[0,i) to b[0,j).
  std::vector<std::size_t> before(b.size() + 1), previous(b.size() + 1), row(b.size() + 1);
  std::iota(previous.begin(), previous.end(), std::size_t{0});
  for (std::size_t i = 1; i <= a.size(); ++i) {
    row[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      bool const same = a[i - 1] == b[j - 1];
      row[j] = std::min({previous[j] + 1, row[j - 1] + 1, previous[j - 1] + (same ? 0 : 1)});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1]) {
        row[j] = std::min(row[j], before[j - 2] + 1);
      }
    }
    std::swap(before, previous);
    std::swap(previous, row);
  }
  return previous[b.size()];
}

std::string closest_name(std::string_view word, std::vector<std::string> const& names)
{
  std::size_t const most_edits = without_dashes(word).size() / 4;
  std::string best;
  std::size_t best_edits = most_edits + 1;
  for (auto const& name : names) {
    auto const edits = edit_distance(word, name);
    if (edits < best_edits) { best = name, best_edits = edits; }
  }
  if (!best.empty()) { return best; }
  for (auto const& name : names) {
    if (abbreviates_or_extends(word, name)) { return name; }
  }
  return {};
}

}  // namespace gpumem::tool
