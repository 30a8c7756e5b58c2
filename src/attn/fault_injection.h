// Fault injection for tests of the validation protocol.
//
// SPINDLE_ATTN_FAULT="name=mode[@R][,name=mode[@R]...]" makes the named backend misbehave in forward():
//   crash: raise SIGSEGV;  hang: sleep forever;  wrong: add 0.5 to every output element;
//   throw: throw spindle::Error (the engine step fails; tests of DP rank failure).
// "@R" limits the fault to the backends of data-parallel rank R (DpConfig::dp_rank); without it
// every rank's backend misbehaves. Unset (the normal case): every backend behaves.
#pragma once

#include <string_view>

namespace spindle::attn {

enum class FaultMode { kNone, kCrash, kHang, kWrong, kThrow };

inline constexpr const char* kFaultEnvVar = "SPINDLE_ATTN_FAULT";

// Parses the spec (as in SPINDLE_ATTN_FAULT) for one backend of DP rank `dp_rank`; throws on an
// unknown mode or a rank that is not a number.
FaultMode parse_fault_for(std::string_view spec, std::string_view backend_name, int dp_rank = 0);
// Reads switches().attn_fault (SPINDLE_ATTN_FAULT; a validation child gets it on its command line).
FaultMode fault_for(std::string_view backend_name, int dp_rank = 0);
// Acts out crash, hang (never returns for those) and throw (throws spindle::Error); no-op otherwise.
void act_out_fatal_fault(FaultMode mode);

}  // namespace spindle::attn
