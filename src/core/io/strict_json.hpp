// JSON from a file, parsed in one linear pass with the checks nlohmann's own parser lacks: a key
// named twice in any object is refused (nlohmann keeps the last one silently), and the nesting
// depth, the members of an object and the elements of an array are capped. (nlohmann's callback
// parser, which could see duplicates, rescans the parent at the end of every child object: a
// header of n tensors took O(n^2) time.)
#pragma once
#include <cstddef>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

namespace swapffn {

struct JsonLimits {
  size_t max_depth;     // nesting levels of objects and arrays; the outermost one is level 1
  size_t max_members;   // members of any one object
  size_t max_elements;  // elements of any one array
};

struct StrictJson {
  nlohmann::json value;
  std::string error;  // empty on success; else why the text was refused (names printable)
};

StrictJson parse_strict_json(std::string_view text, const JsonLimits& limits);

}  // namespace swapffn
