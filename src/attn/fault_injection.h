// Fault injection for tests of the validation protocol.
//
// SPINDLE_ATTN_FAULT="name=mode[,name=mode...]" makes the named backend misbehave in forward():
//   crash: raise SIGSEGV;  hang: sleep forever;  wrong: add 0.5 to every output element.
// Unset (the normal case): every backend behaves.
#pragma once

#include <string_view>

namespace spindle::attn {

enum class FaultMode { kNone, kCrash, kHang, kWrong };

inline constexpr const char* kFaultEnvVar = "SPINDLE_ATTN_FAULT";

// Parses the spec (as in SPINDLE_ATTN_FAULT) for one backend; throws on an unknown mode.
FaultMode parse_fault_for(std::string_view spec, std::string_view backend_name);
// Reads SPINDLE_ATTN_FAULT.
FaultMode fault_for(std::string_view backend_name);
// Acts out crash and hang (never returns for those); no-op otherwise.
void act_out_fatal_fault(FaultMode mode);

}  // namespace spindle::attn
