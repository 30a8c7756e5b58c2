// GBNF (llama.cpp's grammar format, grammars/README.md there) -> Grammar.
//
// Rules `name ::= ...` with alternatives |, sequences, groups ( ), literals "..." and classes
// [...] / [^...] (escapes \xHH \uHHHH \UHHHHHHHH \t \n \r \\ \" \] \[ \-), '.', repetition
// * + ? {m} {m,} {m,n}, comments #; `root` is the start. Terminals are code points: each becomes
// a one-code-point lexeme, so the lexer never has to choose where a terminal ends.
// Token references (<[id]>, <token>, !<...>) are an error naming them.
#pragma once

#include <string_view>

#include "grammar/grammar.h"

namespace spindle::grammar {

// Throws spindle::Error "gbnf: <what> at line L column C".
Grammar grammar_from_gbnf(std::string_view text, size_t max_productions = 200'000);

}  // namespace spindle::grammar
