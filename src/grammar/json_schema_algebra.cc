#include "grammar/json_schema_algebra.h"

#include <fmt/format.h>

#include <algorithm>
#include <set>

#include "util/error.h"

namespace spindle::grammar::json_schema_detail {

namespace {

const std::set<std::string, std::less<>> kAnnotations = {
    "title", "description", "default", "examples", "$schema", "$id", "$comment", "deprecated", "readOnly",
    "writeOnly", "$defs", "definitions", "contentMediaType", "contentEncoding", "$anchor"};
// JSON Schema keywords (any draft) this converter does not implement: an error naming them.
// Keywords outside the vocabulary (vendor extensions, draft-4 "id", ...) are annotations.
const std::set<std::string, std::less<>> kUnsupported = {
    "not", "patternProperties", "dependencies", "dependentRequired", "dependentSchemas", "propertyNames",
    "if", "then", "else", "contains", "minContains", "maxContains", "unevaluatedProperties",
    "unevaluatedItems", "multipleOf", "$dynamicRef", "$dynamicAnchor", "$recursiveRef", "$recursiveAnchor"};
const std::set<std::string, std::less<>> kKeywords = {
    "type", "properties", "required", "additionalProperties", "items", "prefixItems", "additionalItems",
    "minItems", "maxItems", "uniqueItems", "enum", "const", "anyOf", "oneOf", "allOf", "$ref", "pattern",
    "minLength", "maxLength", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "format",
    "minProperties", "maxProperties"};

}  // namespace

bool is_annotation(std::string_view k) { return kAnnotations.count(k) != 0; }
bool is_unsupported(std::string_view k) { return kUnsupported.count(k) != 0; }

std::string escape_pointer(const std::string& key) {
  std::string out;
  for (char c : key) {
    if (c == '~') out += "~0";
    else if (c == '/') out += "~1";
    else out += c;
  }
  return out;
}

void fail(const std::string& ptr, const std::string& what) { SPINDLE_FAIL("json_schema: {} at #{}", what, ptr); }

const Json& resolve(const Json& root, const std::string& ref, const std::string& ptr, std::string& target) {
  if (ref.empty() || ref[0] != '#') fail(ptr + "/$ref", "only local $ref (\"#...\") is supported, not '" + ref + "'");
  target = ref.substr(1);
  std::string decoded;
  for (size_t i = 0; i < target.size(); ++i) {  // percent-decoding
    if (target[i] == '%' && i + 2 < target.size() + 0 && std::isxdigit(static_cast<unsigned char>(target[i + 1])) &&
        std::isxdigit(static_cast<unsigned char>(target[i + 2]))) {
      decoded += static_cast<char>(std::stoi(target.substr(i + 1, 2), nullptr, 16));
      i += 2;
    } else {
      decoded += target[i];
    }
  }
  target = decoded;
  try {
    return root.at(Json::json_pointer(target));
  } catch (const std::exception&) {
    fail(ptr + "/$ref", "$ref '" + ref + "' points to nothing");
  }
}

bool only_annotations(const Json& s, std::initializer_list<const char*> also) {
  for (const auto& item : s.items()) {
    const std::string& k = item.key();
    if (kAnnotations.count(k) || (!kKeywords.count(k) && !kUnsupported.count(k))) continue;
    if (std::find_if(also.begin(), also.end(), [&](const char* a) { return k == a; }) != also.end()) continue;
    return false;
  }
  return true;
}

Json without(const Json& s, std::initializer_list<const char*> keys) {
  Json out = s;
  for (const char* k : keys) out.erase(k);
  return out;
}

Json inline_ref(const Json& root, const Json& s, const std::string& ptr, int depth) {
  if (!s.is_object() || !s.contains("$ref")) return s;
  std::string target;
  const Json& t = resolve(root, s["$ref"].get<std::string>(), ptr, target);
  if (depth > kMaxDepth) fail(ptr, "$ref chain too deep to merge");
  return merge(inline_ref(root, t, target, depth + 1), without(s, {"$ref"}), ptr);
}

namespace {

// Under allOf a property that `from` declares and `other` does not must also satisfy other's
// additionalProperties (false: the key may not appear at all).
void close_undeclared(const Json& from, const Json& other, Json& out) {
  if (!from.contains("properties") || !from["properties"].is_object() || !other.contains("additionalProperties")) return;
  const Json& add = other["additionalProperties"];
  if (add == true) return;
  const bool other_declares = other.contains("properties") && other["properties"].is_object();
  for (const auto& [p, ps] : from["properties"].items()) {
    if (other_declares && other["properties"].contains(p)) continue;
    out["properties"][p] = add == false ? Json(false) : Json{{"allOf", Json::array({ps, add})}};
  }
}

}  // namespace

Json merge(const Json& a, const Json& b, const std::string& ptr) {
  if (a.is_boolean() || b.is_boolean()) {
    if ((a.is_boolean() && !a.get<bool>()) || (b.is_boolean() && !b.get<bool>())) fail(ptr, "allOf contains false");
    return a.is_boolean() ? b : a;
  }
  Json out = a;
  for (const auto& [k, v] : b.items()) {
    if (!out.contains(k)) {
      out[k] = v;
      continue;
    }
    Json& cur = out[k];
    if (cur == v || kAnnotations.count(k) || (!kKeywords.count(k) && !kUnsupported.count(k))) continue;
    if (k == "type") {
      auto as_list = [](const Json& t) { return t.is_array() ? t : Json::array({t}); };
      Json both = Json::array();
      for (const auto& x : as_list(cur)) {
        for (const auto& y : as_list(v)) {
          if (x == y) both.push_back(x);
          else if ((x == "integer" && y == "number") || (x == "number" && y == "integer")) both.push_back("integer");
        }
      }
      if (both.empty()) fail(ptr, "allOf: the subschemas' types do not intersect");
      cur = both.size() == 1 ? both[0] : both;
    } else if (k == "required") {
      for (const auto& r : v) {
        if (std::find(cur.begin(), cur.end(), r) == cur.end()) cur.push_back(r);
      }
    } else if (k == "properties") {
      for (const auto& [p, ps] : v.items()) {
        cur[p] = cur.contains(p) ? Json{{"allOf", Json::array({cur[p], ps})}} : ps;
      }
    } else if (k == "minimum" || k == "minLength" || k == "minItems" || k == "minProperties") {
      cur = std::max(cur.get<double>(), v.get<double>());
    } else if (k == "maximum" || k == "maxLength" || k == "maxItems" || k == "maxProperties") {
      cur = std::min(cur.get<double>(), v.get<double>());
    } else if (k == "enum") {
      Json both = Json::array();
      for (const auto& x : cur) {
        if (std::find(v.begin(), v.end(), x) != v.end()) both.push_back(x);
      }
      cur = both;
    } else if (k == "additionalProperties" && (v == false || cur == false)) {
      cur = false;
    } else if (k == "allOf") {
      for (const auto& x : v) cur.push_back(x);
    } else {
      fail(ptr, "allOf: subschemas that disagree on '" + k + "' are not supported");
    }
  }
  close_undeclared(a, b, out);
  close_undeclared(b, a, out);
  return out;
}

unsigned types_of(const Json& s) {
  static const char* const kNames[] = {"object", "array", "string", "number", "boolean", "null"};
  auto bit = [](const std::string& t) -> unsigned {
    if (t == "integer") return 1u << 3;
    for (unsigned i = 0; i < 6; ++i) {
      if (t == kNames[i]) return 1u << i;
    }
    return 0;
  };
  auto of_value = [](const Json& v) -> unsigned {
    return v.is_object() ? 1u : v.is_array() ? 2u : v.is_string() ? 4u : v.is_number() ? 8u : v.is_boolean() ? 16u : 32u;
  };
  if (!s.is_object()) return 63;
  unsigned out = 63;
  if (s.contains("type")) {
    unsigned t = 0;
    for (const auto& x : s["type"].is_array() ? s["type"] : Json::array({s["type"]})) {
      if (x.is_string()) t |= bit(x.get<std::string>());
    }
    out &= t;
  }
  if (s.contains("const")) out &= of_value(s["const"]);
  if (s.contains("enum") && s["enum"].is_array()) {
    unsigned t = 0;
    for (const auto& v : s["enum"]) t |= of_value(v);
    out &= t;
  }
  return out;
}

std::optional<std::vector<Json>> pinned(const Json& s, const std::string& name) {
  if (!s.is_object() || !s.contains("properties") || !s["properties"].contains(name)) return std::nullopt;
  const Json& p = s["properties"][name];
  if (!p.is_object()) return std::nullopt;
  if (p.contains("const")) return std::vector<Json>{p["const"]};
  if (p.contains("enum") && p["enum"].is_array()) return std::vector<Json>(p["enum"].begin(), p["enum"].end());
  return std::nullopt;
}

bool required_in(const Json& s, const std::string& name) {
  if (!s.is_object() || !s.contains("required") || !s["required"].is_array()) return false;
  for (const auto& r : s["required"]) {
    if (r == name) return true;
  }
  return false;
}

void check_exclusive(const std::vector<Json>& branches, const std::string& ptr) {
  for (size_t i = 0; i < branches.size(); ++i) {
    for (size_t j = i + 1; j < branches.size(); ++j) {
      const Json& a = branches[i];
      const Json& b = branches[j];
      if ((types_of(a) & types_of(b)) == 0) continue;
      bool disjoint = false;
      if (a.is_object() && a.contains("properties") && a["properties"].is_object()) {
        for (const auto& item : a["properties"].items()) {
          const std::string& name = item.key();
          const auto va = pinned(a, name), vb = pinned(b, name);
          if (!va || !vb || !required_in(a, name) || !required_in(b, name)) continue;
          bool overlap = false;
          for (const Json& x : *va) overlap = overlap || std::find(vb->begin(), vb->end(), x) != vb->end();
          if (!overlap) {
            disjoint = true;
            break;
          }
        }
      }
      if (!disjoint) {
        fail(ptr, fmt::format("oneOf branches {} and {} may both match a value (only types or a required "
                              "const/enum property that tell them apart are supported)", i, j));
      }
    }
  }
}

}  // namespace spindle::grammar::json_schema_detail
