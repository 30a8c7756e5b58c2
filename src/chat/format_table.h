// Finding a parser format (reasoning_parser.h, tool_call_parser.h) by its command-line name.
#pragma once

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <ranges>
#include <span>
#include <string_view>

#include "util/error.h"

namespace spindle::chat {

// The entry of `formats` whose `name` is `name`; else spindle::Error "unknown <what> '<name>':
// known are <each name>, none and auto (from the chat template)".
template <typename Format>
const Format& find_format(std::span<const Format> formats, std::string_view name, std::string_view what) {
  for (const Format& f : formats) {
    if (f.name == name) return f;
  }
  SPINDLE_FAIL("unknown {} '{}': known are {}, none and auto (from the chat template)", what, name,
               fmt::join(formats | std::views::transform(&Format::name), ", "));
}

}  // namespace spindle::chat
