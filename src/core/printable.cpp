#include "core/printable.hpp"

#include <cstdint>
#include <cstdio>

namespace swapffn {
namespace {

void append_hex(std::string& out, const char* prefix, unsigned v) {
  char buf[8];
  std::snprintf(buf, sizeof buf, "%s%02X", prefix, v);
  out += buf;
}

// Length of the well-formed UTF-8 sequence at s[i] (2..4 bytes) and its code point, or 0 when
// the bytes there are not one (overlong forms and surrogates included).
size_t utf8_sequence(std::string_view s, size_t i, uint32_t& cp) {
  const auto b0 = static_cast<uint8_t>(s[i]);
  size_t n;
  uint32_t min;
  if ((b0 & 0xE0) == 0xC0) n = 2, cp = b0 & 0x1F, min = 0x80;
  else if ((b0 & 0xF0) == 0xE0) n = 3, cp = b0 & 0x0F, min = 0x800;
  else if ((b0 & 0xF8) == 0xF0) n = 4, cp = b0 & 0x07, min = 0x10000;
  else return 0;
  if (i + n > s.size()) return 0;
  for (size_t k = 1; k < n; ++k) {
    const auto b = static_cast<uint8_t>(s[i + k]);
    if ((b & 0xC0) != 0x80) return 0;
    cp = (cp << 6) | (b & 0x3F);
  }
  if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
  return n;
}

// The escaped text of s's first kMaxPrintedBytes bytes (whole characters).
std::string escape_head(std::string_view s, size_t& consumed) {
  std::string out;
  size_t i = 0;
  while (i < s.size() && i < kMaxPrintedBytes) {
    const auto c = static_cast<uint8_t>(s[i]);
    if (c < 0x80) {
      switch (c) {
        case '\n': out += "\\n"; break;
        case '\t': out += "\\t"; break;
        case '\r': out += "\\r"; break;
        case '\\': out += "\\\\"; break;
        case '\'': out += "\\'"; break;
        default:
          if (c < 0x20 || c == 0x7F) append_hex(out, "\\x", c);
          else out += static_cast<char>(c);
      }
      ++i;
      continue;
    }
    uint32_t cp = 0;
    const size_t n = utf8_sequence(s, i, cp);
    if (n == 0) {
      append_hex(out, "\\x", c);
      ++i;
    } else {
      if (cp <= 0x9F) append_hex(out, "\\u00", cp);  // C1 controls: U+009B is a one-character CSI
      else out.append(s.substr(i, n));
      i += n;
    }
  }
  consumed = i;
  return out;
}

std::string cut_note(std::string_view s) {
  return "... (" + std::to_string(s.size()) + " bytes in all)";
}

}  // namespace

std::string printable(std::string_view s) {
  size_t consumed = 0;
  std::string out = escape_head(s, consumed);
  return consumed < s.size() ? out + cut_note(s) : out;
}

std::string in_quotes(std::string_view s) {
  size_t consumed = 0;
  std::string out(1, '\'');
  out += escape_head(s, consumed);
  out += '\'';
  return consumed < s.size() ? out + cut_note(s) : out;
}

}  // namespace swapffn
