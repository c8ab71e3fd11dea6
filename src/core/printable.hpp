// Text from a file, made safe to print in an error message: a hostile tensor name or config key
// must not drive the user's terminal (escape sequences) or flood it (a 100 MB name).
#pragma once
#include <cstddef>
#include <string>
#include <string_view>

namespace swapffn {

// Bytes of input printed before the rest is cut (the message then says how long it was).
inline constexpr size_t kMaxPrintedBytes = 300;

// s with control characters (C0, DEL, C1), backslashes, single quotes and bytes that are not
// well-formed UTF-8 escaped as \n, \t, \r, \\, \', \xNN or \u00NN; cut after kMaxPrintedBytes.
std::string printable(std::string_view s);

// printable(s) in single quotes (a cut note after them): how every error names what it read
// from a file.
std::string in_quotes(std::string_view s);

}  // namespace swapffn
