#include "core/io/strict_json.hpp"

#include <utility>
#include <vector>

#include "core/printable.hpp"

namespace swapffn {
namespace {

using json = nlohmann::json;

// A SAX handler that builds the DOM itself. Containers being filled sit on a stack; a pointer
// into its parent stays valid while a container is open, as nothing is added to the parent then.
class Builder {
 public:
  explicit Builder(const JsonLimits& limits) : limits_(limits) {}

  bool null() { return add(json(nullptr)) != nullptr; }
  bool boolean(bool v) { return add(json(v)) != nullptr; }
  bool number_integer(json::number_integer_t v) { return add(json(v)) != nullptr; }
  bool number_unsigned(json::number_unsigned_t v) { return add(json(v)) != nullptr; }
  bool number_float(json::number_float_t v, const std::string&) { return add(json(v)) != nullptr; }
  bool string(std::string& v) { return add(json(std::move(v))) != nullptr; }
  bool binary(json::binary_t&) { return fail("binary value (not JSON)"); }
  bool start_object(size_t) { return open(json::object()); }
  bool start_array(size_t) { return open(json::array()); }
  bool end_object() { return close(); }
  bool end_array() { return close(); }

  bool key(std::string& k) {
    Open& top = open_.back();
    if (top.value->contains(k)) return fail("key " + in_quotes(k) + " appears twice " + where());
    if (top.value->size() >= limits_.max_members)
      return fail("an object has more than " + std::to_string(limits_.max_members) +
                  " members " + where());
    pending_key_ = k;
    pending_ = &(*top.value)[std::move(k)];
    return true;
  }

  template <class Exception>
  bool parse_error(size_t, const std::string&, const Exception& e) {
    return fail("malformed JSON: " + printable(e.what()));
  }

  json root;
  std::string error;

 private:
  struct Open {
    json* value;
    std::string key;  // where it sits in its parent, for messages: "/key" or "[index]"
  };

  // Places v where the parser is (root, the pending key, or the end of the open array).
  json* add(json v) {
    if (open_.empty()) {
      root = std::move(v);
      return &root;
    }
    json& parent = *open_.back().value;
    if (parent.is_object()) {
      *pending_ = std::move(v);
      return pending_;
    }
    if (parent.size() >= limits_.max_elements) {
      fail("an array has more than " + std::to_string(limits_.max_elements) + " elements " +
           where());
      return nullptr;
    }
    parent.push_back(std::move(v));
    return &parent.back();
  }

  bool open(json v) {
    if (open_.size() >= limits_.max_depth)
      return fail("nesting deeper than " + std::to_string(limits_.max_depth) + " levels " +
                  where());
    std::string key;
    if (!open_.empty() && open_.back().value->is_object())
      key.append(1, '/').append(pending_key_);
    else if (!open_.empty())
      key.append(1, '[').append(std::to_string(open_.back().value->size())).append(1, ']');
    json* placed = add(std::move(v));
    if (placed == nullptr) return false;
    open_.push_back({placed, std::move(key)});
    return true;
  }

  bool close() {
    open_.pop_back();
    return true;
  }

  // Where the open container is, as a path of keys from the root.
  std::string where() const {
    if (open_.size() <= 1) return "at the top level";
    std::string path;
    for (size_t i = 1; i < open_.size(); ++i) path += open_[i].key;
    return "in " + in_quotes(path);
  }

  bool fail(std::string why) {
    if (error.empty()) error = std::move(why);
    return false;
  }

  JsonLimits limits_;
  std::vector<Open> open_;
  json* pending_ = nullptr;
  std::string pending_key_;
};

}  // namespace

StrictJson parse_strict_json(std::string_view text, const JsonLimits& limits) {
  Builder b(limits);
  const bool ok = json::sax_parse(text.begin(), text.end(), &b);
  if (!ok) return {json(), b.error.empty() ? "malformed JSON" : b.error};
  return {std::move(b.root), ""};
}

}  // namespace swapffn
