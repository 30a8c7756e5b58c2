// JSON Schema -> Grammar, the part that reads schemas as JSON (json_schema.cc builds the
// grammar): the keyword vocabulary, local $ref resolution, allOf merging, and the oneOf
// exclusivity check. Internal to grammar/ (json_schema.h is the interface).
#pragma once

#include <nlohmann/json.hpp>

#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace spindle::grammar::json_schema_detail {

using Json = nlohmann::ordered_json;

inline constexpr int kMaxDepth = 64;

// Keywords without effect on the language (title, $defs, ...), and keywords of JSON Schema this
// converter does not implement (an error naming them). Any keyword outside the vocabulary is an
// annotation too.
bool is_annotation(std::string_view keyword);
bool is_unsupported(std::string_view keyword);

// A key as a JSON pointer token (~ -> ~0, / -> ~1).
std::string escape_pointer(const std::string& key);
// Throws spindle::Error "json_schema: <what> at #<ptr>".
[[noreturn]] void fail(const std::string& ptr, const std::string& what);

// The target of a local $ref ("#/..."; percent-decoded) in root; target: its pointer.
const Json& resolve(const Json& root, const std::string& ref, const std::string& ptr, std::string& target);
// s holds no keyword but annotations and `also`.
bool only_annotations(const Json& s, std::initializer_list<const char*> also = {});
Json without(const Json& s, std::initializer_list<const char*> keys);
// A subschema with its $ref replaced by the target (merged with its siblings).
Json inline_ref(const Json& root, const Json& s, const std::string& ptr, int depth);
// allOf's two schemas as one (types intersected, required united, bounds tightened, enums
// intersected, properties combined with allOf); a disagreement it cannot merge is an error.
Json merge(const Json& a, const Json& b, const std::string& ptr);

// The JSON types a (ref-inlined) schema admits, as a bit set (object, array, string, number,
// boolean, null); all six when it does not say.
unsigned types_of(const Json& s);
// The values a schema pins property `name` to (const or enum), or nullopt.
std::optional<std::vector<Json>> pinned(const Json& s, const std::string& name);
bool required_in(const Json& s, const std::string& name);
// oneOf is matched as anyOf, which is exact only when no value can satisfy two branches: each
// pair of (merged) branches must admit disjoint types, or pin a property both require to
// disjoint constants. Otherwise an error at ptr.
void check_exclusive(const std::vector<Json>& branches, const std::string& ptr);

}  // namespace spindle::grammar::json_schema_detail
