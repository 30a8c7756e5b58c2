#include "grammar/json_schema.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <set>
#include <unordered_map>

#include "grammar/json_lexemes.h"
#include "grammar/json_schema_algebra.h"
#include "grammar/regex_parser.h"
#include "util/error.h"

namespace spindle::grammar {
namespace {

using namespace json_schema_detail;  // NOLINT: the schema algebra (json_schema_algebra.h)

constexpr int64_t kMaxExpansion = 4096;  // explicit array positions / string length bounds

class Converter {
 public:
  Converter(const Json& root, const JsonGrammarOptions& o) : root_(root), o_(o) {
    g_.set_max_productions(o.max_productions);
    t0_ = std::chrono::steady_clock::now();
    RegexPtr ws;
    if (!o.whitespace_pattern.empty()) {
      ws = parse_regex(o.whitespace_pattern, RegexMode::kFullMatch);
    } else if (o.whitespace == JsonGrammarOptions::Whitespace::kFlexible) {
      ws = re_repeat(re_chars({{'\t', '\n'}, {'\r', '\r'}, {' ', ' '}}), 0, -1);
    } else {
      ws = re_optional(re_alt({re_char(' '), re_concat({re_char('\n'), re_repeat(re_chars({{'\t', '\t'}, {' ', ' '}}), 0, 48)})}));
    }
    ws_ = ws;
    obj_open_ = g_.lexeme(re_concat({re_char('{'), ws}));
    obj_close_ = g_.lexeme(re_concat({ws, re_char('}')}));
    arr_open_ = g_.lexeme(re_concat({re_char('['), ws}));
    arr_close_ = g_.lexeme(re_concat({ws, re_char(']')}));
    comma_ = g_.lexeme(re_concat({ws, re_char(','), ws}));
  }

  Grammar run(const Json& schema) {
    const int32_t root = g_.add_nonterminal("root");
    g_.add_production(root, {value(schema, "", 0)});
    g_.set_start(root);
    return std::move(g_);
  }

  Grammar run_object() {
    const int32_t root = g_.add_nonterminal("root");
    g_.add_production(root, {object(Json::object(), "", 0)});
    g_.set_start(root);
    return std::move(g_);
  }

 private:

  void tick(const std::string& ptr, int depth) {
    if (depth > kMaxDepth) fail(ptr, fmt::format("schema nested deeper than {} levels", kMaxDepth));
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count();
    if (s > o_.max_seconds) fail(ptr, fmt::format("compilation exceeded {} s", o_.max_seconds));
  }

  int32_t key_lexeme(const RegexPtr& key) {
    return g_.lexeme(re_concat({key, ws_, re_char(':'), ws_}));
  }

  int32_t seq(std::vector<std::vector<int32_t>> alts, const char* name) { return g_.choice(std::move(alts), name); }

  // Any JSON value.
  int32_t any() {
    if (any_ >= 0) return any_;
    any_ = g_.add_nonterminal("any");
    const int32_t member = seq({{key_lexeme(json_string(0, -1)), any_}}, "member");
    const int32_t members = g_.repeat(seq({{comma_, member}}, "comma-member"), 0, -1, "members");
    const int32_t obj = seq({{obj_open_, obj_close_}, {obj_open_, member, members, obj_close_}}, "any-object");
    const int32_t items = g_.repeat(seq({{comma_, any_}}, "comma-any"), 0, -1, "items");
    const int32_t arr = seq({{arr_open_, arr_close_}, {arr_open_, any_, items, arr_close_}}, "any-array");
    for (int32_t s : {obj, arr, g_.lexeme(json_string(0, -1)), g_.lexeme(json_number()), g_.literal("true"),
                      g_.literal("false"), g_.literal("null")}) {
      g_.add_production(any_, {s});
    }
    return any_;
  }

  void check_keywords(const Json& s, const std::string& ptr) const {
    for (const auto& [k, v] : s.items()) {
      if (is_unsupported(k)) fail(ptr + "/" + escape_pointer(k), "unsupported keyword '" + k + "'");
    }
  }

  int32_t ref_symbol(const std::string& ref, const std::string& ptr, int depth) {
    std::string target;
    const Json& t = resolve(root_, ref, ptr, target);
    auto it = ref_nt_.find(target);
    if (it != ref_nt_.end()) return it->second;
    const int32_t nt = g_.add_nonterminal("ref:" + target);
    ref_nt_.emplace(target, nt);
    g_.add_production(nt, {value(t, target, depth + 1)});
    return nt;
  }

  int32_t value(const Json& s, const std::string& ptr, int depth) {
    tick(ptr, depth);
    if (s.is_boolean()) {
      if (s.get<bool>()) return any();
      fail(ptr, "schema false allows no value");
    }
    if (!s.is_object()) fail(ptr, "a schema must be an object or a boolean");
    check_keywords(s, ptr);
    if (s.contains("$ref")) {
      if (!s["$ref"].is_string()) fail(ptr + "/$ref", "$ref must be a string");
      if (only_annotations(s, {"$ref"})) return ref_symbol(s["$ref"].get<std::string>(), ptr, depth);
      return value(inline_ref(root_, s, ptr, depth), ptr, depth + 1);
    }
    if (s.contains("allOf")) {
      const Json& all = s["allOf"];
      if (!all.is_array() || all.empty()) fail(ptr + "/allOf", "allOf must be a non-empty array");
      Json merged = without(s, {"allOf"});
      for (size_t i = 0; i < all.size(); ++i) {
        merged = merge(merged, inline_ref(root_, all[i], ptr + "/allOf/" + std::to_string(i), depth), ptr + "/allOf/" + std::to_string(i));
      }
      return value(merged, ptr, depth + 1);
    }
    for (const char* comb : {"anyOf", "oneOf"}) {
      if (!s.contains(comb)) continue;
      const Json& alts = s[comb];
      if (!alts.is_array() || alts.empty()) fail(ptr + "/" + comb, std::string(comb) + " must be a non-empty array");
      if (s.contains("anyOf") && s.contains("oneOf")) fail(ptr, "anyOf together with oneOf is not supported");
      const Json base = without(s, {comb});
      const bool plain = only_annotations(base);
      if (std::string(comb) == "oneOf") check_exclusive(branches(base, alts, ptr + "/oneOf", depth), ptr + "/oneOf");
      std::vector<std::vector<int32_t>> out;
      for (size_t i = 0; i < alts.size(); ++i) {
        const std::string p = ptr + "/" + comb + "/" + std::to_string(i);
        out.push_back({plain ? value(alts[i], p, depth + 1) : value(merge(base, inline_ref(root_, alts[i], p, depth), p), p, depth + 1)});
      }
      return seq(std::move(out), comb);
    }
    if (s.contains("enum") || s.contains("const")) return literals(s, ptr);
    std::vector<std::string> types;
    if (s.contains("type")) {
      const Json& t = s["type"];
      for (const auto& x : t.is_array() ? t : Json::array({t})) {
        if (!x.is_string()) fail(ptr + "/type", "type must be a string or an array of strings");
        types.push_back(x.get<std::string>());
      }
    } else {
      if (only_annotations(s)) return any();
      types = {"object", "array", "string", "number", "boolean", "null"};
    }
    if (std::count(types.begin(), types.end(), "number") && std::count(types.begin(), types.end(), "integer")) {
      std::erase(types, std::string("integer"));
    }
    std::vector<std::vector<int32_t>> out;
    for (const std::string& t : types) out.push_back({typed(s, t, ptr, depth)});
    return out.size() == 1 ? out[0][0] : seq(std::move(out), "types");
  }

  // oneOf's branches, each merged with the schema around it.
  std::vector<Json> branches(const Json& base, const Json& alts, const std::string& ptr, int depth) {
    std::vector<Json> out;
    for (size_t i = 0; i < alts.size(); ++i) {
      const std::string p = ptr + "/" + std::to_string(i);
      out.push_back(merge(base, inline_ref(root_, alts[i], p, depth), p));
    }
    return out;
  }

  int32_t literals(const Json& s, const std::string& ptr) {
    std::vector<std::vector<int32_t>> out;
    std::vector<Json> values;
    if (s.contains("const")) values.push_back(s["const"]);
    if (s.contains("enum")) {
      if (!s["enum"].is_array()) fail(ptr + "/enum", "enum must be an array");
      for (const auto& v : s["enum"]) {
        if (!s.contains("const") || v == s["const"]) values.push_back(v);
      }
      if (s.contains("const")) values.erase(values.begin());
    }
    std::set<std::string> types;
    if (s.contains("type")) {
      for (const auto& x : s["type"].is_array() ? s["type"] : Json::array({s["type"]})) types.insert(x.get<std::string>());
    }
    for (const Json& v : values) {
      if (!types.empty()) {
        std::string t = v.is_object() ? "object" : v.is_array() ? "array" : v.is_string() ? "string" : v.is_boolean() ? "boolean" : v.is_null() ? "null" : "number";
        const bool is_int = v.is_number_integer() || (v.is_number_float() && std::floor(v.get<double>()) == v.get<double>());
        if (!types.count(t) && !(t == "number" && is_int && types.count("integer"))) continue;
      }
      out.push_back({g_.literal(v.dump())});
    }
    if (out.empty()) fail(ptr, "enum/const allows no value");
    return seq(std::move(out), "enum");
  }

  int32_t typed(const Json& s, const std::string& t, const std::string& ptr, int depth) {
    if (t == "object") return object(s, ptr, depth);
    if (t == "array") return array(s, ptr, depth);
    if (t == "string") return string(s, ptr);
    if (t == "number" || t == "integer") return number(s, ptr, t == "integer");
    if (t == "boolean") return seq({{g_.literal("true")}, {g_.literal("false")}}, "boolean");
    if (t == "null") return g_.literal("null");
    fail(ptr + "/type", "unknown type '" + t + "'");
  }

  int64_t count(const Json& s, const char* key, int64_t dflt, const std::string& ptr) const {
    if (!s.contains(key)) return dflt;
    const Json& v = s[key];
    if (!v.is_number() || v.get<double>() < 0 || v.get<double>() != std::floor(v.get<double>())) {
      fail(ptr + "/" + key, std::string(key) + " must be a non-negative integer");
    }
    return static_cast<int64_t>(std::min(v.get<double>(), 1e15));
  }

  int32_t object(const Json& s, const std::string& ptr, int depth) {
    std::set<std::string> required;
    if (s.contains("required")) {
      for (const auto& r : s["required"]) {
        if (!r.is_string()) fail(ptr + "/required", "required must hold strings");
        required.insert(r.get<std::string>());
      }
    }
    struct Prop {
      int32_t symbol;
      bool required;
    };
    std::vector<Prop> props;
    std::set<std::string> declared;
    if (s.contains("properties")) {
      if (!s["properties"].is_object()) fail(ptr + "/properties", "properties must be an object");
      for (const auto& [name, ps] : s["properties"].items()) {
        declared.insert(name);
        if (ps == false) {  // the key may not appear (e.g. closed by another allOf branch)
          if (required.count(name)) return g_.add_nonterminal("never");  // no object matches
          continue;
        }
        const std::string p = ptr + "/properties/" + escape_pointer(name);
        const int32_t key = key_lexeme(re_literal(Json(name).dump()));
        props.push_back({seq({{key, value(ps, p, depth + 1)}}, "property"), required.count(name) > 0});
      }
    }
    // Extra keys: additionalProperties (unspecified: allowed unless strict).
    std::optional<Json> additional;
    if (s.contains("additionalProperties")) {
      if (!(s["additionalProperties"].is_boolean() && !s["additionalProperties"].get<bool>())) additional = s["additionalProperties"];
    } else if (!o_.strict) {
      additional = Json(true);
    }
    for (const std::string& r : required) {
      if (declared.count(r)) continue;
      if (!additional) return g_.add_nonterminal("never");  // a required key no object may have
      const int32_t key = key_lexeme(re_literal(Json(r).dump()));
      props.push_back({seq({{key, value(*additional, ptr + "/additionalProperties", depth + 1)}}, "property"), true});
    }
    const int64_t num_required = static_cast<int64_t>(required.size());
    if (count(s, "minProperties", 0, ptr) > num_required) fail(ptr + "/minProperties", "minProperties above the number of required properties is not supported");
    if (s.contains("maxProperties") && (additional || count(s, "maxProperties", 0, ptr) < static_cast<int64_t>(props.size()))) {
      fail(ptr + "/maxProperties", "maxProperties is supported only when it allows every declared property and no others");
    }
    // after_i: something was emitted, declared properties i.. may follow; first_i: nothing yet.
    // Declared properties keep their order; extra keys (when allowed) may come anywhere.
    int32_t extra = -1;
    if (additional) {
      std::vector<std::string> names(declared.begin(), declared.end());
      for (const std::string& r : required) names.push_back(r);
      extra = seq({{key_lexeme(json_key_not_in(names)), value(*additional, ptr + "/additionalProperties", depth + 1)}}, "extra");
    }
    int32_t rest_after = g_.add_nonterminal("rest");
    int32_t rest_first = g_.add_nonterminal("first");
    g_.add_production(rest_after, {});
    g_.add_production(rest_first, {});
    if (extra >= 0) {
      g_.add_production(rest_after, {comma_, extra, rest_after});
      g_.add_production(rest_first, {extra, rest_after});
    }
    for (size_t i = props.size(); i-- > 0;) {
      const int32_t after = g_.add_nonterminal("rest");
      const int32_t first = g_.add_nonterminal("first");
      g_.add_production(after, {comma_, props[i].symbol, rest_after});
      g_.add_production(first, {props[i].symbol, rest_after});
      if (extra >= 0 && o_.extra_keys_anywhere) {
        g_.add_production(after, {comma_, extra, after});
        g_.add_production(first, {extra, after});
      }
      if (!props[i].required) {
        g_.add_production(after, {rest_after});
        g_.add_production(first, {rest_first});
      }
      rest_after = after;
      rest_first = first;
    }
    return seq({{obj_open_, rest_first, obj_close_}}, "object");
  }

  int32_t array(const Json& s, const std::string& ptr, int depth) {
    if (s.contains("uniqueItems") && s["uniqueItems"] != false) fail(ptr + "/uniqueItems", "uniqueItems is not supported");
    std::vector<int32_t> prefix;
    const Json* rest = nullptr;
    std::string rest_ptr;
    Json any_schema = true;
    if (s.contains("prefixItems")) {
      for (size_t i = 0; i < s["prefixItems"].size(); ++i) prefix.push_back(value(s["prefixItems"][i], ptr + "/prefixItems/" + std::to_string(i), depth + 1));
      if (s.contains("items")) rest = &s["items"], rest_ptr = ptr + "/items";
    } else if (s.contains("items") && s["items"].is_array()) {
      for (size_t i = 0; i < s["items"].size(); ++i) prefix.push_back(value(s["items"][i], ptr + "/items/" + std::to_string(i), depth + 1));
      if (s.contains("additionalItems")) rest = &s["additionalItems"], rest_ptr = ptr + "/additionalItems";
    } else if (s.contains("items")) {
      rest = &s["items"], rest_ptr = ptr + "/items";
    }
    if (rest == nullptr) rest = &any_schema;
    const bool rest_allowed = !(rest->is_boolean() && !rest->get<bool>());
    const int64_t k = static_cast<int64_t>(prefix.size());
    const int64_t min = count(s, "minItems", 0, ptr);
    int64_t max = s.contains("maxItems") ? count(s, "maxItems", 0, ptr) : -1;
    if (!rest_allowed) max = max < 0 ? k : std::min(max, k);
    if (max >= 0 && min > max) fail(ptr + "/minItems", "minItems above the items allowed");
    const int64_t explicit_positions = std::max(k, min);
    if (explicit_positions > kMaxExpansion || (max >= 0 && max - explicit_positions > kMaxExpansion)) {
      fail(ptr + "/maxItems", fmt::format("item counts above {} are not supported", kMaxExpansion));
    }
    const int32_t elem = rest_allowed ? value(*rest, rest_ptr, depth + 1) : -1;
    // tail: positions from explicit_positions on (all optional tail items).
    const auto i0 = explicit_positions;
    int32_t tail = g_.add_nonterminal("tail");
    if (max >= 0 && i0 >= max) {
      g_.add_production(tail, {});
    } else {
      const int32_t comma_elem = seq({{comma_, elem}}, "comma-item");
      const int r = max < 0 ? -1 : static_cast<int>(max - i0);
      if (i0 == 0) {
        g_.add_production(tail, {});
        g_.add_production(tail, {elem, g_.repeat(comma_elem, 0, r < 0 ? -1 : r - 1, "items")});
      } else {
        g_.add_production(tail, {g_.repeat(comma_elem, 0, r, "items")});
      }
    }
    for (int64_t i = i0; i-- > 0;) {
      const int32_t a = g_.add_nonterminal("pos");
      const int32_t e = i < k ? prefix[static_cast<size_t>(i)] : elem;
      std::vector<int32_t> rhs;
      if (i > 0) rhs.push_back(comma_);
      rhs.push_back(e);
      rhs.push_back(tail);
      g_.add_production(a, std::move(rhs));
      if (i >= min) g_.add_production(a, {});
      tail = a;
    }
    return seq({{arr_open_, tail, arr_close_}}, "array");
  }

  int32_t string(const Json& s, const std::string& ptr) {
    const int64_t min = count(s, "minLength", 0, ptr);
    const int64_t max = s.contains("maxLength") ? count(s, "maxLength", 0, ptr) : -1;
    const bool has_length = s.contains("minLength") || s.contains("maxLength");
    if (s.contains("pattern")) {
      if (!s["pattern"].is_string()) fail(ptr + "/pattern", "pattern must be a string");
      if (has_length) fail(ptr + "/pattern", "pattern together with minLength/maxLength is not supported");
      try {
        return g_.lexeme(json_quoted(parse_regex(s["pattern"].get<std::string>(), RegexMode::kSearch)));
      } catch (const Error& e) {
        fail(ptr + "/pattern", e.message());
      }
    }
    if (s.contains("format")) {
      if (!s["format"].is_string()) fail(ptr + "/format", "format must be a string");
      if (auto re = json_format_regex(s["format"].get<std::string>())) {
        if (has_length) fail(ptr + "/format", "format together with minLength/maxLength is not supported");
        return g_.lexeme(json_quoted(*re));
      }
      // Other formats are annotations (JSON Schema 2019-09 and later).
    }
    if (min > kMaxExpansion || max > kMaxExpansion) fail(ptr + "/maxLength", fmt::format("string lengths above {} are not supported", kMaxExpansion));
    if (max >= 0 && min > max) fail(ptr + "/minLength", "minLength above maxLength");
    return g_.lexeme(json_string(static_cast<int>(min), static_cast<int>(max)));
  }

  int32_t number(const Json& s, const std::string& ptr, bool integer) {
    if (s.contains("multipleOf")) fail(ptr + "/multipleOf", "multipleOf is not supported");
    std::optional<double> lo, hi;
    bool lo_excl = false, hi_excl = false;
    auto bound = [&](const char* key) -> std::optional<double> {
      if (!s.contains(key) || s[key].is_boolean()) return std::nullopt;
      if (!s[key].is_number()) fail(ptr + "/" + key, std::string(key) + " must be a number");
      const double v = s[key].get<double>();
      if (std::fabs(v) > 9e15) fail(ptr + "/" + key, "bound beyond 9e15 is not supported");
      return v;
    };
    lo = bound("minimum");
    hi = bound("maximum");
    if (auto x = bound("exclusiveMinimum"); x && (!lo || *x >= *lo)) lo = x, lo_excl = true;
    if (auto x = bound("exclusiveMaximum"); x && (!hi || *x <= *hi)) hi = x, hi_excl = true;
    if (s.contains("exclusiveMinimum") && s["exclusiveMinimum"].is_boolean()) lo_excl = s["exclusiveMinimum"].get<bool>();
    if (s.contains("exclusiveMaximum") && s["exclusiveMaximum"].is_boolean()) hi_excl = s["exclusiveMaximum"].get<bool>();
    if (integer) {
      std::optional<int64_t> a, b;
      if (lo) a = static_cast<int64_t>(lo_excl ? std::floor(*lo) + 1 : std::ceil(*lo));
      if (hi) b = static_cast<int64_t>(hi_excl ? std::ceil(*hi) - 1 : std::floor(*hi));
      if (a && b && *a > *b) fail(ptr, "the integer bounds allow no value");
      return g_.lexeme(json_integer_range(a, b));
    }
    if ((lo && *lo != std::floor(*lo)) || (hi && *hi != std::floor(*hi))) {
      fail(ptr, "non-integral bounds on a number are not supported");
    }
    std::optional<int64_t> a, b;
    if (lo) a = static_cast<int64_t>(*lo);
    if (hi) b = static_cast<int64_t>(*hi);
    if (a && b && (*a > *b || (*a == *b && (lo_excl || hi_excl)))) fail(ptr, "the number bounds allow no value");
    return g_.lexeme(json_number_range(a, lo_excl, b, hi_excl));
  }

  const Json& root_;
  JsonGrammarOptions o_;
  Grammar g_;
  RegexPtr ws_;
  int32_t obj_open_, obj_close_, arr_open_, arr_close_, comma_;
  int32_t any_ = -1;
  std::unordered_map<std::string, int32_t> ref_nt_;
  std::chrono::steady_clock::time_point t0_;
};

}  // namespace

Grammar grammar_from_json_schema_value(const nlohmann::ordered_json& schema, const JsonGrammarOptions& options) {
  try {
    return Converter(schema, options).run(schema);
  } catch (const nlohmann::json::exception& e) {  // a keyword of the wrong JSON type
    SPINDLE_FAIL("json_schema: malformed schema: {}", e.what());
  }
}

Grammar grammar_from_json_schema(std::string_view schema_text, const JsonGrammarOptions& options) {
  nlohmann::ordered_json schema;
  try {
    schema = nlohmann::ordered_json::parse(schema_text);
  } catch (const std::exception& e) {
    SPINDLE_FAIL("json_schema: not valid JSON: {}", e.what());
  }
  return grammar_from_json_schema_value(schema, options);
}

Grammar grammar_json_object(const JsonGrammarOptions& options) {
  const nlohmann::ordered_json empty = nlohmann::ordered_json::object();
  return Converter(empty, options).run_object();
}

}  // namespace spindle::grammar
