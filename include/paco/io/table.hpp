#pragma once
// table: the Markdown results tables the tools print (paco_train's results, the benchmarks'
// rows). Columns size themselves to their widest cell; a column whose cells are all numbers
// (with an optional unit: "3.5664", "7.0 MB", "+0.12%", "4.10x") is right-aligned, any other is
// left-aligned. `cell` formats a number with printf's fixed notation and an optional unit.
//
//   io::table t({"row", "val bpb", "bytes sent"});
//   t.add({"dense", io::cell(3.5664, 4), io::cell(7.0, 1, " MB")});
//   t.print(stdout);

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <string>
#include <string_view>
#include <vector>

#include "paco/core/error.hpp"

namespace paco::io {

// Ensures: x in fixed notation with `digits` decimals, then `unit` ("%.{digits}f{unit}");
// `sign` prints a + before positive values.
inline std::string cell(double x, int digits, std::string_view unit = "", bool sign = false) {
  char b[64];
  std::snprintf(b, sizeof b, sign ? "%+.*f" : "%.*f", digits, x);
  return std::string(b) + std::string(unit);
}

class table {
 public:
  explicit table(std::vector<std::string> header) : header_(std::move(header)) {}

  // Requires: cells.size() == columns() (checked: throws error_exception naming both counts).
  void add(std::vector<std::string> cells) {
    if (cells.size() != header_.size())
      throw error_exception({errc::invalid_argument,
                             "table: a row of " + std::to_string(cells.size()) + " cells for " +
                                 std::to_string(header_.size()) + " columns"});
    rows_.push_back(std::move(cells));
  }

  std::size_t columns() const noexcept { return header_.size(); }
  std::size_t rows() const noexcept { return rows_.size(); }

  // Ensures: the header, the separator and every row, each line "| a | b |\n".
  std::string str() const {
    std::vector<std::size_t> w(header_.size());
    std::vector<bool> right(header_.size(), !rows_.empty());
    for (std::size_t c = 0; c < header_.size(); ++c) {
      w[c] = width(header_[c]);
      for (const auto& r : rows_) {
        w[c] = std::max(w[c], width(r[c]));
        if (!r[c].empty() && !numeric(r[c])) right[c] = false;
      }
    }
    std::string s = line(header_, w, std::vector<bool>(w.size(), false)) + "|";
    for (auto n : w) s += std::string(n + 2, '-') + "|";
    s += "\n";
    for (const auto& r : rows_) s += line(r, w, right);
    return s;
  }

  void print(std::FILE* f) const { std::fputs(str().c_str(), f); }

 private:
  // Display width: UTF-8 continuation bytes take no column.
  static std::size_t width(const std::string& s) {
    return std::size_t(std::ranges::count_if(s, [](char ch) { return (ch & 0xC0) != 0x80; }));
  }
  // A number with an optional unit after it: sign, digits and one point, then anything but a
  // digit ("MB", "%", "x").
  static bool numeric(const std::string& s) {
    std::size_t i = (s[0] == '+' || s[0] == '-') ? 1 : 0, digits = 0;
    for (; i < s.size() && (std::isdigit(static_cast<unsigned char>(s[i])) || s[i] == '.'); ++i)
      digits += s[i] != '.';
    if (digits == 0) return false;
    for (; i < s.size(); ++i)
      if (std::isdigit(static_cast<unsigned char>(s[i]))) return false;
    return true;
  }
  static std::string line(const std::vector<std::string>& cells, const std::vector<std::size_t>& w,
                          const std::vector<bool>& right) {
    std::string s = "|";
    for (std::size_t c = 0; c < cells.size(); ++c) {
      const std::string pad(w[c] - width(cells[c]), ' ');
      s += " " + (right[c] ? pad + cells[c] : cells[c] + pad) + " |";
    }
    return s + "\n";
  }

  std::vector<std::string> header_;
  std::vector<std::vector<std::string>> rows_;
};

}  // namespace paco::io
