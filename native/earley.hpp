// The Earley parser over lexemes, its chart nodes interned. The reference is
// constrain/engine/grammar/earley.py: this builds the same nodes, item for item, in the same
// order, so both engines give the same answers (and the same completions).
#pragma once

#include <atomic>
#include <climits>
#include <cstdint>
#include <map>
#include <memory>
#include <stdexcept>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "nbytes.hpp"

namespace constrain {

constexpr int32_t kRuleEnd = INT32_MIN;  // the next symbol of a dotted rule at its end

// The units a call may burn are spent (the caller raises its fuel's error).
struct OutOfFuel : std::runtime_error {
    OutOfFuel() : std::runtime_error("the work budget of this call is spent") {}
};

// Units of work one call may spend: the Python fuel's units, settled after the call.
struct Meter {
    int64_t left = INT64_MAX;
    int64_t used = 0;
    void burn(int64_t units) {
        used += units;
        if (used > left) throw OutOfFuel();
    }
};

struct ChartNode;
using NodeRef = std::shared_ptr<ChartNode>;
// The bytes one parser's nodes hold, shared with them: a node may outlive its parser, and be
// released on a thread that holds no lock.
using ByteCount = std::shared_ptr<std::atomic<int64_t>>;

// A dotted rule and the node it started in (nullptr: the node holding the item).
struct Item {
    int32_t dotted;
    ChartNode* origin;
    bool operator==(const Item& o) const { return dotted == o.dotted && origin == o.origin; }
    bool operator<(const Item& o) const {
        return dotted != o.dotted ? dotted < o.dotted : std::less<ChartNode*>()(origin, o.origin);
    }
};

struct ItemHash {
    size_t operator()(const Item& i) const noexcept {
        return size_t(uint64_t(uint32_t(i.dotted)) * 0x9E3779B97F4A7C15ull ^
                      uint64_t(reinterpret_cast<uintptr_t>(i.origin)));
    }
};

struct ItemsHash {
    size_t operator()(const std::vector<Item>& items) const noexcept {
        uint64_t h = 1469598103934665603ull;
        for (const Item& i : items) h = (h ^ ItemHash()(i)) * 1099511628211ull;
        return size_t(h);
    }
};

// One interned Earley set with what it needs of the sets before it (its origins, held).
struct ChartNode : std::enable_shared_from_this<ChartNode> {
    std::vector<Item> items;                       // in the order the closure added them
    std::vector<NodeRef> origins;                  // the distinct origins of the items
    std::vector<int32_t> expected;                 // the lexemes it can scan next, sorted
    bool accepts = false;                          // the text so far is a sentence
    std::atomic<int32_t> lexer_start{-1};          // where the next lexemes start (-1: unknown)
    std::map<std::vector<int32_t>, NodeRef> scans;  // scan(lexemes) remembered (null: none)
    std::vector<std::pair<int32_t, Item>> waiting;  // (nonterminal after the dot, item), by it
    bool waiting_built = false;
    ByteCount counter;                     // its parser's count of node bytes (null: none)
    int64_t counted = 0;                   // what it added to `counter`
    size_t scan_keys = 0;                  // bytes of the lexemes keying `scans`
    static std::atomic<int64_t> alive;     // nodes in existence (for leak tests)
    static std::atomic<uint64_t> serials;  // serials handed out
    const uint64_t serial = serials++;     // never reused: names the node in outliving memos
    ChartNode() { ++alive; }
    ChartNode(const ChartNode&) = delete;
    ChartNode& operator=(const ChartNode&) = delete;
    size_t heap_bytes() const;  // itself (allocated by make_shared) and what it holds
    // Brings `counter` up to date after what it holds changed (under the grammar's lock).
    void recount();
    // Releases what it holds without recursion (a chain of origins can be a text long).
    ~ChartNode();
};

// The grammar as dotted rules, numbered as the Python parser numbers them.
struct DottedRules {
    std::vector<int32_t> next_sym;  // nonterminal id >= 0, ~lexeme id, or kRuleEnd
    std::vector<int32_t> lhs;       // per dotted rule
    std::vector<uint8_t> nullable;  // per nonterminal
    std::vector<std::vector<int32_t>> first_dotted;  // per nonterminal: its rules' first items
    int32_t start = 0;              // the nonterminal the root predicts
    int32_t accept_item = 1;        // "$start -> start ."
    // Throws std::invalid_argument naming the first inconsistency (sizes, ids out of range).
    void validate() const;
};

class EarleyParser {
public:
    EarleyParser(DottedRules rules, size_t max_items, Meter& meter);
    ~EarleyParser();  // empties the scans it filled: they and the origins make cycles

    const NodeRef& root() const { return root_; }
    // The node after scanning one of `lexemes` (sorted) at `node`; null if none can be.
    NodeRef scan(const NodeRef& node, const std::vector<int32_t>& lexemes, Meter& meter);
    // The items of `node` waiting for nonterminal `a` (a range of `node.waiting`).
    std::pair<const std::pair<int32_t, Item>*, const std::pair<int32_t, Item>*> waiting(
        ChartNode& node, int32_t a) const;
    const DottedRules& rules() const { return rules_; }

    size_t max_items;        // items the interned nodes may hold before they are forgotten
    size_t items_held = 0;   // items in the interned nodes
    size_t forgotten = 0;    // times they were forgotten
    size_t n_nodes() const { return interned_.size(); }
    // The heap it holds: the rules, predictions, the index of interned nodes, and every node
    // of its alive (interned or held elsewhere), from a running count (O(1)).
    size_t heap_bytes() const;

private:
    struct Prediction {
        std::vector<int32_t> items;      // dotted rules it adds (origin: the node itself)
        std::vector<int32_t> predicted;  // nonterminals it predicts
    };
    NodeRef close(const std::vector<Item>& kernel, int32_t predict, Meter& meter);
    void add_prediction(int32_t a, Meter& meter);
    const Prediction& prediction(int32_t a, Meter& meter);
    void drop_scans();
    void forget();

    DottedRules rules_;
    size_t rules_bytes_ = 0;  // what the rules hold
    std::vector<std::unique_ptr<Prediction>> predictions_;  // per nonterminal, on first use
    size_t predictions_bytes_ = 0;  // what the predictions made hold
    ByteCount node_bytes_ = std::make_shared<std::atomic<int64_t>>(0);
    std::unordered_map<std::vector<Item>, NodeRef, ItemsHash> interned_;
    std::vector<std::weak_ptr<ChartNode>> scanned_;  // nodes whose scans were filled since
    NodeRef root_;
    // the closure being built (reused between calls)
    std::vector<Item> items_, agenda_;
    std::unordered_set<Item, ItemHash> seen_;
    std::vector<uint8_t> predicted_;
    std::vector<int32_t> predicted_list_;
};

}  // namespace constrain
