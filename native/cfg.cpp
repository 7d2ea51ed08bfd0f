#include "cfg.hpp"

#include <algorithm>
#include <iterator>
#include <set>
#include <tuple>

namespace constrain {

namespace {

constexpr int64_t kFoundPerUnit = 16;  // tokens and lexeme ends a walk finds per unit burnt

bool intersects(const std::vector<int>& a, const std::vector<int32_t>& b) {
    for (int x : a)
        if (std::binary_search(b.begin(), b.end(), int32_t(x))) return true;
    return false;
}

}  // namespace

std::shared_ptr<const Piece> PieceCache::get(const PieceKey& key) {
    auto found = index_.find(key);
    if (found == index_.end()) return nullptr;
    order_.splice(order_.begin(), order_, found->second);
    return found->second->second;
}

void PieceCache::put(const PieceKey& key, std::shared_ptr<const Piece> piece) {
    auto found = index_.find(key);
    if (found != index_.end()) {
        bytes_ -= entry_bytes(found->first, *found->second->second);
        order_.erase(found->second);
        index_.erase(found);
    }
    bytes_ += entry_bytes(key, *piece);
    order_.emplace_front(key, std::move(piece));
    index_.emplace(key, order_.begin());
    while (order_.size() > 1 && (order_.size() > max_entries_ || bytes_ > max_bytes_)) {
        bytes_ -= entry_bytes(order_.back().first, *order_.back().second);
        index_.erase(order_.back().first);
        order_.pop_back();
    }
}

size_t PieceCache::entry_bytes(const PieceKey& key, const Piece& piece) {
    using Indexed = std::pair<const PieceKey, std::list<Entry>::iterator>;
    return kListNodeBytes + sizeof(Entry) + kHashNodeBytes + sizeof(Indexed) +
           2 * copy_bytes(key.starts) + piece_bytes(piece);
}

size_t piece_bytes(const Piece& piece) {
    size_t out = kSharedBlockBytes + sizeof(Piece) + vector_bytes(piece.runs) +
                 vector_bytes(piece.tokens) + tree_bytes(piece.ends);
    for (const auto& [tag, nodes] : piece.ends) out += vector_bytes(nodes);
    return out;
}

CFGCore::CFGCore(std::shared_ptr<Lexer> lexer, DottedRules rules, std::vector<int32_t> ignore,
                 std::vector<int32_t> specials, size_t max_items, Meter& meter)
    : lexer_(std::move(lexer)),
      parser_(std::move(rules), max_items, meter),
      ignore_(std::move(ignore)),
      specials_(std::move(specials)) {
    std::sort(ignore_.begin(), ignore_.end());
    std::sort(specials_.begin(), specials_.end());
    for (int32_t j : ignore_)
        if (j < 0 || size_t(j) >= lexer_->n_lexemes())
            throw std::invalid_argument("an ignored lexeme is out of range");
    for (int32_t j : specials_)
        if (j < 0 || size_t(j) >= lexer_->n_lexemes())
            throw std::invalid_argument("a special lexeme is out of range");
    for (int32_t sym : parser_.rules().next_sym)
        if (sym < 0 && sym != kRuleEnd && size_t(~sym) >= lexer_->n_lexemes())
            throw std::invalid_argument("a rule's lexeme is out of range");
    start_of(*parser_.root());
}

int32_t CFGCore::start_of(ChartNode& node) {
    const int32_t known = node.lexer_start.load();
    if (known >= 0) return known;
    std::vector<int32_t> allowed;
    std::set_union(node.expected.begin(), node.expected.end(), ignore_.begin(), ignore_.end(),
                   std::back_inserter(allowed));
    std::vector<int> lexemes;
    std::set_difference(allowed.begin(), allowed.end(), specials_.begin(), specials_.end(),
                        std::back_inserter(lexemes));
    const int32_t start = lexer_->start_of(lexemes);
    node.lexer_start.store(start);
    return start;
}

NodeRef CFGCore::end(const NodeRef& node, int32_t tag, Meter& meter) {
    const std::vector<int>& tags = lexer_->tag_set(tag);
    std::vector<int32_t> scanned;
    for (int j : tags)
        if (std::binary_search(node->expected.begin(), node->expected.end(), int32_t(j)))
            scanned.push_back(j);
    std::sort(scanned.begin(), scanned.end());
    if (!scanned.empty()) return parser_.scan(node, scanned, meter);
    return intersects(tags, ignore_) ? node : nullptr;
}

NodeRef CFGCore::after_lexeme(const NodeRef& node, int32_t s, Meter& meter) {
    if (s == kFresh) return node;
    const int32_t tag = lexer_->tag(s);
    return tag ? end(node, tag, meter) : nullptr;
}

bool CFGCore::step(NodeRef& node, int32_t& s, const uint8_t* data, size_t n, Meter& meter) {
    if (!n) return true;
    if (s == kFresh) s = start_of(*node);
    for (size_t i = 0; i < n; ++i) {
        const uint8_t b = data[i];
        int32_t t = lexer_->next(s, b);
        if (!t) {
            const int32_t tag = lexer_->tag(s);
            if (!lexer_->can_end(tag, b)) return false;  // nothing ends, or a keyword in a word
            node = end(node, tag, meter);
            if (!node) return false;
            t = lexer_->next(start_of(*node), b);
            if (!t) return false;
        }
        s = t;
    }
    return true;
}

bool CFGCore::admits(const NodeRef& node, int32_t s, const DFATable& language, int32_t start,
                     size_t max_pairs, Meter& meter, const std::vector<uint8_t>& bytes) {
    struct Pair {
        int32_t r;
        NodeRef node;
        int32_t s;
    };
    if (s == kFresh) s = start_of(*node);
    // keyed by the node's serial: a node freed during the search cannot alias a later one
    std::set<std::tuple<int32_t, uint64_t, int32_t>> seen{{start, node->serial, s}};
    std::vector<Pair> stack{{start, node, s}};
    const auto& classes = lexer_->classes();
    while (!stack.empty()) {
        Pair here = std::move(stack.back());
        stack.pop_back();
        meter.burn(1);
        // bytes of one lexer class, language state and lexeme ending step alike
        std::vector<std::tuple<int32_t, int32_t, bool>> stepped;
        const int32_t tag = lexer_->tag(here.s);
        for (const uint8_t byte : bytes) {
            const int32_t r = language.at(here.r, byte);
            if (!r) continue;
            const bool ends = tag && lexer_->can_end(tag, byte);
            const auto alike = std::make_tuple(classes[byte], r, ends);
            if (std::find(stepped.begin(), stepped.end(), alike) != stepped.end()) continue;
            stepped.push_back(alike);
            NodeRef after = here.node;
            int32_t t = here.s;
            if (!step(after, t, &byte, 1, meter)) return false;
            if (seen.emplace(r, after->serial, t).second) stack.push_back({r, std::move(after), t});
            if (max_pairs && seen.size() > max_pairs) return false;
        }
    }
    return true;
}

void CFGCore::walk(const NodeRef& node, int32_t s, const Trie& trie, const SliceFilter& filter,
                   PieceCache& cache, Meter& meter,
                   const std::function<void(const Piece&)>& found,
                   const TextBelow* text) {
    struct Pending {
        NodeRef node;
        PieceKey key;
    };
    if (s == kFresh) s = start_of(*node);
    std::vector<Pending> stack;
    stack.push_back({node, PieceKey{filter.combination, s, true, {}}});
    std::vector<int64_t> roots(trie.children.begin() + trie.child_start[0],
                               trie.children.begin() + trie.child_start[1]);
    while (!stack.empty()) {
        Pending here = std::move(stack.back());
        stack.pop_back();
        std::shared_ptr<const Piece> piece = cache.get(here.key);
        if (!piece) {
            meter.burn(1);
            const auto& starts = here.key.at_root ? roots : here.key.starts;
            auto built = std::make_shared<Piece>(
                walk_lexer(*lexer_, trie, here.key.state, starts, here.key.at_root, filter,
                           text));
            size_t n_found = built->n_tokens();
            for (const auto& [tag, nodes] : built->ends) n_found += nodes.size();
            meter.burn(1 + int64_t(n_found) / kFoundPerUnit);
            piece = built;
            cache.put(here.key, piece);
        }
        found(*piece);
        for (const auto& [tag, nodes] : piece->ends) {
            NodeRef after = end(here.node, tag, meter);
            if (!after) continue;
            const int32_t start = start_of(*after);
            stack.push_back({std::move(after), PieceKey{filter.combination, start, false, nodes}});
        }
    }
}

}  // namespace constrain
