// Containment of a regular language in the live strings of an automaton: the check behind
// vocabulary slices. Reference: constrain.engine.slices.admits.
#pragma once

#include <cstdint>
#include <unordered_set>
#include <vector>

#include "trie.hpp"

namespace constrain {

// Whether every string of `language` (and each prefix), read from `state`, keeps the
// automaton whose transitions `next(q, b)` give (0 = dead) in a live state: a search of the
// product's reachable pairs, refusing at the first pair where the language reads a byte the
// automaton cannot, and past `max_pairs` pairs (0: no limit) with "not shown" (false).
template <typename Next>
bool admits(Next&& next, int32_t state, const DFATable& language, int32_t language_start,
            size_t max_pairs = 0) {
    std::unordered_set<uint64_t> seen;
    std::vector<std::pair<int32_t, int32_t>> stack{{language_start, state}};
    seen.insert((uint64_t(uint32_t(language_start)) << 32) | uint32_t(state));
    while (!stack.empty()) {
        auto [r, q] = stack.back();
        stack.pop_back();
        const int32_t* row = language.next.data() + size_t(r) * 256;
        for (int b = 0; b < 256; ++b) {
            int32_t r2 = row[b];
            if (!r2) continue;
            int32_t q2 = next(q, uint8_t(b));
            if (!q2) return false;
            uint64_t key = (uint64_t(uint32_t(r2)) << 32) | uint32_t(q2);
            if (seen.insert(key).second) stack.emplace_back(r2, q2);
            if (max_pairs && seen.size() > max_pairs) return false;
        }
    }
    return true;
}

}  // namespace constrain
