#include "trie.hpp"

#include <algorithm>
#include <limits>
#include <string_view>
#include <stdexcept>
#include <string>

namespace constrain {

namespace {

[[noreturn]] void fail(const std::string& what) {
    throw std::invalid_argument("trie: " + what);
}

void require(bool ok, const char* what) {
    if (!ok) fail(what);
}

}  // namespace

void Trie::validate() const {
    const size_t n = byte.size();
    require(n >= 1, "no root node");
    require(depth.size() == n && subtree_end.size() == n,
            "byte, depth and subtree_end differ in size");
    require(token_start.size() == n + 1 && child_start.size() == n + 1,
            "token_start and child_start need one entry per node and one more");
    require(depth[0] == 0 && subtree_end[0] == int64_t(n), "node 0 is not the root of every node");
    // DFS order: a node's depth is at most its predecessor's + 1, and its subtree ends at the
    // first later node no deeper than it (found with a stack of the open nodes)
    std::vector<size_t> open{0};
    for (size_t i = 1; i < n; ++i) {
        if (depth[i] < 1 || depth[i] > depth[i - 1] + 1)
            fail("node " + std::to_string(i) + " has a depth out of DFS order");
        while (depth[open.back()] >= depth[i]) {
            if (subtree_end[open.back()] != int64_t(i))
                fail("node " + std::to_string(open.back()) + " has a wrong subtree_end");
            open.pop_back();
        }
        open.push_back(i);
    }
    for (size_t k = 1; k < open.size(); ++k)
        if (subtree_end[open[k]] != int64_t(n))
            fail("node " + std::to_string(open[k]) + " has a wrong subtree_end");
    const auto max_id = int64_t(std::numeric_limits<int32_t>::max());
    require(token_start[0] == 0 && token_start[n] == int64_t(tokens.size()),
            "token_start does not span tokens");
    require(child_start[0] == 0 && child_start[n] == int64_t(children.size()),
            "child_start does not span children");
    for (size_t i = 0; i < n; ++i) {
        if (token_start[i] > token_start[i + 1] || child_start[i] > child_start[i + 1])
            fail("node " + std::to_string(i) + " has a decreasing token or child range");
        for (int64_t k = child_start[i]; k < child_start[i + 1]; ++k) {
            const int64_t c = children[size_t(k)];
            if (c <= int64_t(i) || c >= subtree_end[i] || depth[size_t(c)] != depth[i] + 1)
                fail("node " + std::to_string(i) + " lists a child outside its subtree");
        }
    }
    for (int64_t t : tokens) require(t >= 0 && t <= max_id, "a token id is out of range");
}

namespace {

void add_tokens(const Trie& trie, int64_t node, std::vector<int32_t>& out) {
    for (int64_t k = trie.token_start[size_t(node)]; k < trie.token_start[size_t(node) + 1]; ++k)
        out.push_back(int32_t(trie.tokens[size_t(k)]));
}

// Bytes in a UTF-8 character, by its first byte (1 for a stray continuation byte).
int character_length(uint8_t lead) {
    return lead < 0xC0 ? 1 : lead < 0xE0 ? 2 : lead < 0xF0 ? 3 : 4;
}

}  // namespace

Piece walk_lexer(Lexer& lexer, const Trie& trie, int32_t state, const std::vector<int64_t>& starts,
                 bool end_at_start, const SliceFilter& filter, const TextBelow* text) {
    Piece piece;
    std::vector<int32_t> below;  // below[d]: the lexer state before reading depth d of a subtree
    SliceFilter without_text = filter;  // inside a subtree whose text tokens were taken whole
    if (text) without_text.combination |= text->slices;
    const bool take_text = text && filter.slot_bits &&
                           (filter.combination & text->slices) != text->slices;
    for (int64_t root : starts) {
        const int32_t base = trie.depth[size_t(root)];
        const int64_t end = trie.subtree_end[size_t(root)];
        below.assign(1, state);
        int64_t node = root;
        int64_t text_taken_until = -1;  // node index where that subtree ends
        size_t first_character = 0;     // bytes of the first character on the path
        int64_t run = -1;  // the token slot where the run of live nodes' tokens began
        auto end_run = [&] {  // before the tokens of `node` and its subtree
            const int64_t at = trie.token_start[size_t(node)];
            if (run >= 0 && at > run) piece.runs.emplace_back(run, at);
            run = -1;
        };
        auto skip_subtree = [&] {
            end_run();
            node = trie.subtree_end[size_t(node)];
        };
        while (node < end) {
            const SliceFilter& here = node < text_taken_until ? without_text : filter;
            if (!here.keeps_node(node)) {  // only tokens of admitted slices below
                skip_subtree();
                continue;
            }
            const size_t d = size_t(trie.depth[size_t(node)] - base);
            const int32_t before = below[d];
            const uint8_t b = trie.byte[size_t(node)];
            const int32_t after = lexer.next(before, b);
            if (!after) {
                if (d > 0 || end_at_start) {
                    int32_t tag = lexer.tag(before);
                    if (tag && lexer.can_end(tag, b)) piece.ends[tag].push_back(node);
                }
                skip_subtree();
                continue;
            }
            if (d == 0) first_character = size_t(character_length(b));
            if (take_text && node >= text_taken_until && d + 1 == first_character &&
                text->admitted_after(after)) {
                const int64_t subtree_end = trie.subtree_end[size_t(node)];
                const uint32_t taken = text->slices & ~filter.combination;
                for (int64_t k = trie.token_start[size_t(node)];
                     k < trie.token_start[size_t(subtree_end)]; ++k)
                    if (filter.slot_bits[k] & taken)
                        piece.tokens.push_back(int32_t(trie.tokens[size_t(k)]));
                text_taken_until = subtree_end;
            }
            // the node's tokens: all of them, those of admitted slices too (allowed anyway)
            if (run < 0) run = trie.token_start[size_t(node)];
            if (below.size() <= d + 1) below.resize(d + 2);
            below[d + 1] = after;
            ++node;
        }
        end_run();  // node == end
    }
    return piece;
}

std::vector<int32_t> walk_dfa(const Trie& trie, const DFATable& dfa, int32_t state) {
    std::vector<int32_t> out;
    if (state <= 0 || state >= dfa.n_states) return out;
    std::vector<int32_t> below(1, state);  // below[d]: the state before reading depth d + 1
    const auto n = int64_t(trie.n_nodes());
    int64_t node = 1;
    while (node < n) {
        const size_t d = size_t(trie.depth[size_t(node)] - 1);
        const int32_t after = dfa.at(below[d], trie.byte[size_t(node)]);
        if (!after) {
            node = trie.subtree_end[size_t(node)];
            continue;
        }
        add_tokens(trie, node, out);
        if (below.size() <= d + 1) below.resize(d + 2);
        below[d + 1] = after;
        ++node;
    }
    return out;
}

size_t Piece::n_tokens() const {
    size_t n = tokens.size();
    for (const auto& [begin, end] : runs) n += size_t(end - begin);
    return n;
}

TrieArrays build_trie(const TokenTexts& texts, int64_t n_ids) {
    TrieArrays out;
    const int64_t known = std::min<int64_t>(n_ids, texts.size());
    std::vector<int64_t> ids;
    for (int64_t i = 0; i < known; ++i)
        if (!texts.text(i).empty()) ids.push_back(i);
    std::stable_sort(ids.begin(), ids.end(),
                     [&](int64_t a, int64_t b) { return texts.text(a) < texts.text(b); });
    out.byte = {0};
    out.depth = {0};
    out.parent = {-1};
    out.node_of_token.assign(size_t(std::max<int64_t>(n_ids, 0)), 0);
    std::vector<int64_t> path{0};  // path[d]: the node at depth d on the current branch
    std::string_view previous;
    for (int64_t id : ids) {
        const std::string_view data = texts.text(id);
        if (data != previous) {
            size_t common = 0;
            const size_t limit = std::min(data.size(), previous.size());
            while (common < limit && data[common] == previous[common]) ++common;
            path.resize(common + 1);
            for (size_t d = common; d < data.size(); ++d) {
                out.byte.push_back(uint8_t(data[d]));
                out.depth.push_back(int32_t(d + 1));
                out.parent.push_back(path[d]);
                path.push_back(int64_t(out.byte.size()) - 1);
            }
            previous = data;
        }
        out.node_of_token[size_t(id)] = path[data.size()];
    }
    const size_t n = out.byte.size();
    out.subtree_end.assign(n, int64_t(n));  // the next node in DFS order no deeper than it
    std::vector<int64_t> stack;
    for (size_t node = 0; node < n; ++node) {
        while (!stack.empty() && out.depth[size_t(stack.back())] >= out.depth[node]) {
            out.subtree_end[size_t(stack.back())] = int64_t(node);
            stack.pop_back();
        }
        stack.push_back(int64_t(node));
    }
    // children and tokens grouped by node, in node (DFS, so byte) order and in id order
    out.child_start.assign(n + 1, 0);
    for (size_t node = 1; node < n; ++node) ++out.child_start[size_t(out.parent[node]) + 1];
    for (size_t i = 0; i < n; ++i) out.child_start[i + 1] += out.child_start[i];
    out.children.resize(n > 0 ? n - 1 : 0);
    std::vector<int64_t> fill(out.child_start.begin(), out.child_start.end() - 1);
    for (size_t node = 1; node < n; ++node)
        out.children[size_t(fill[size_t(out.parent[node])]++)] = int64_t(node);
    out.token_start.assign(n + 1, 0);
    for (int64_t id : ids) ++out.token_start[size_t(out.node_of_token[size_t(id)]) + 1];
    for (size_t i = 0; i < n; ++i) out.token_start[i + 1] += out.token_start[i];
    out.tokens.resize(ids.size());
    fill.assign(out.token_start.begin(), out.token_start.end() - 1);
    std::vector<int64_t> by_id(ids);
    std::sort(by_id.begin(), by_id.end());
    for (int64_t id : by_id) {
        const size_t node = size_t(out.node_of_token[size_t(id)]);
        out.tokens[size_t(fill[node]++)] = id;
    }
    return out;
}

}  // namespace constrain
