// A grammar read token by token over one vocabulary: the state after a token and whether a
// token is allowed, one native call each (what a sampler's check and a sequence's advance
// ask). The reference is TokenAutomaton.step_once (constrain/engine/matcher.py) over
// CFGAutomaton.step and step_special (constrain/engine/grammar/cfg.py).
#pragma once

#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "cfg.hpp"
#include "key_check.hpp"
#include "texts.hpp"

namespace constrain {

class TokenSteps {
public:
    // `specials`: (special lexeme, its token id); `eos`: the end-of-sequence ids.
    // Throws std::invalid_argument when an id is outside the texts.
    TokenSteps(std::shared_ptr<CFGCore> core, std::shared_ptr<const TokenTexts> texts,
               std::vector<std::pair<int32_t, int64_t>> specials, std::vector<int64_t> eos);
    // Reads text or special `token` (not EOS) from (node, s) in place; false when the token
    // is not allowed there (and for ids with no text that are not special, or out of range).
    bool step(NodeRef& node, int32_t& s, int64_t token, Meter& meter);
    // Whether `token` is allowed at (node, s): EOS where the text is complete, else `step`.
    bool allows(const NodeRef& node, int32_t s, int64_t token, Meter& meter);
    // The text so far is complete: the lexeme in progress may end and the parser accepts.
    bool accepting(const NodeRef& node, int32_t s, Meter& meter);
    CFGCore& core() { return *core_; }
    int64_t n_tokens() const { return texts_->size(); }
    // The heap it holds of its own (the grammar and the texts are shared): nothing grows.
    size_t heap_bytes() const { return vector_bytes(specials_) + vector_bytes(eos_); }

private:
    std::shared_ptr<CFGCore> core_;
    std::shared_ptr<const TokenTexts> texts_;
    std::vector<std::pair<int32_t, int64_t>> specials_;  // sorted by token
    std::vector<int64_t> eos_;                           // sorted
};

// One sequence's position held natively, so that a check passes only the token: a grammar
// state of `steps` and, with a key check, that check's state. The owner moves it after every
// change of its sequence (advance, rollback, end). Checks are unmetered: with fuel active the
// caller asks `TokenSteps` with a meter instead.
class TokenCursor {
public:
    // Throws std::invalid_argument for a null `steps` or a key check over another vocabulary.
    TokenCursor(std::shared_ptr<TokenSteps> steps, std::shared_ptr<const KeyCheck> keys);
    void move_to(NodeRef node, int32_t s, std::shared_ptr<const KeyState> here);
    void finish();  // after EOS: nothing more is allowed
    // `TokenSteps::allows` at the position, and the key check lets `token` through.
    bool allows(int64_t token);
    TokenSteps& steps() { return *steps_; }

private:
    std::shared_ptr<TokenSteps> steps_;
    std::shared_ptr<const KeyCheck> keys_;  // null: no key check
    NodeRef node_;                          // null: finished (or never moved)
    int32_t s_ = 0;
    std::shared_ptr<const KeyState> here_;
    Meter unmetered_;
};

}  // namespace constrain
