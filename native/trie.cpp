#include "trie.hpp"

namespace constrain {

namespace {

void add_tokens(const Trie& trie, int64_t node, std::vector<int32_t>& out) {
    for (int64_t k = trie.token_start[size_t(node)]; k < trie.token_start[size_t(node) + 1]; ++k)
        out.push_back(int32_t(trie.tokens[size_t(k)]));
}

}  // namespace

Piece walk_lexer(Lexer& lexer, const Trie& trie, int32_t state, const std::vector<int64_t>& starts,
                 bool end_at_start) {
    Piece piece;
    std::vector<int32_t> below;  // below[d]: the lexer state before reading depth d of a subtree
    for (int64_t root : starts) {
        const int32_t base = trie.depth[size_t(root)];
        const int64_t end = trie.subtree_end[size_t(root)];
        below.assign(1, state);
        int64_t node = root;
        while (node < end) {
            const size_t d = size_t(trie.depth[size_t(node)] - base);
            const int32_t before = below[d];
            const uint8_t b = trie.byte[size_t(node)];
            const int32_t after = lexer.next(before, b);
            if (!after) {
                if (d > 0 || end_at_start) {
                    int32_t tag = lexer.tag(before);
                    if (tag && lexer.can_end(tag, b)) piece.ends[tag].push_back(node);
                }
                node = trie.subtree_end[size_t(node)];
                continue;
            }
            add_tokens(trie, node, piece.tokens);
            if (below.size() <= d + 1) below.resize(d + 2);
            below[d + 1] = after;
            ++node;
        }
    }
    return piece;
}

std::vector<int32_t> walk_dfa(const Trie& trie, const int32_t* table, int64_t n_states,
                              int32_t state, const uint8_t* accepting) {
    std::vector<int32_t> out;
    if (state <= 0 || state >= n_states) return out;
    std::vector<int32_t> below(1, state);  // below[d]: the state before reading depth d + 1
    const auto n = int64_t(trie.n_nodes());
    int64_t node = 1;
    while (node < n) {
        const size_t d = size_t(trie.depth[size_t(node)] - 1);
        const int32_t after = table[size_t(below[d]) * 256 + trie.byte[size_t(node)]];
        if (!after) {
            node = trie.subtree_end[size_t(node)];
            continue;
        }
        if (!accepting || accepting[size_t(after)]) add_tokens(trie, node, out);
        if (below.size() <= d + 1) below.resize(d + 2);
        below[d + 1] = after;
        ++node;
    }
    return out;
}

}  // namespace constrain
