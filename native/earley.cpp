#include "earley.hpp"

#include <algorithm>

namespace constrain {

namespace {

// Nodes whose last reference went while another node was being released.
thread_local std::vector<NodeRef> releasing;
thread_local bool draining = false;

}  // namespace

std::atomic<int64_t> ChartNode::alive{0};
std::atomic<uint64_t> ChartNode::serials{0};

ChartNode::~ChartNode() {
    --alive;
    if (counter) counter->fetch_sub(counted, std::memory_order_relaxed);
    for (NodeRef& o : origins) releasing.push_back(std::move(o));
    for (auto& [lexemes, next] : scans)
        if (next) releasing.push_back(std::move(next));
    if (draining) return;
    draining = true;
    while (!releasing.empty()) {
        NodeRef last = std::move(releasing.back());
        releasing.pop_back();
        last.reset();  // may push the nodes it held
    }
    draining = false;
}

size_t ChartNode::heap_bytes() const {
    return kSharedBlockBytes + sizeof(ChartNode) + vector_bytes(items) + vector_bytes(origins) +
           vector_bytes(expected) + tree_bytes(scans) + scan_keys + vector_bytes(waiting);
}

void ChartNode::recount() {
    if (!counter) return;
    const auto now = int64_t(heap_bytes());
    counter->fetch_add(now - counted, std::memory_order_relaxed);
    counted = now;
}

void DottedRules::validate() const {
    auto require = [](bool ok, const char* what) {
        if (!ok) throw std::invalid_argument(what);
    };
    const auto n_nts = int32_t(first_dotted.size());
    require(lhs.size() == next_sym.size(), "lhs and next_sym differ in length");
    require(nullable.size() == first_dotted.size(), "nullable needs one entry per nonterminal");
    require(!next_sym.empty() && next_sym.back() == kRuleEnd, "the last dotted rule must end");
    require(start >= 0 && start < n_nts, "the start nonterminal is out of range");
    require(accept_item >= 0 && size_t(accept_item) < next_sym.size(), "accept item out of range");
    for (size_t d = 0; d < next_sym.size(); ++d) {
        require(next_sym[d] < n_nts, "a dotted rule's symbol is out of range");
        require(lhs[d] >= 0 && lhs[d] < n_nts, "a dotted rule's left side is out of range");
    }
    for (const auto& first : first_dotted)
        for (int32_t d : first) {
            require(d >= 0 && size_t(d) < next_sym.size(), "a first dotted rule is out of range");
            require(d == 0 || next_sym[size_t(d) - 1] == kRuleEnd, "a rule must start after one");
        }
}

EarleyParser::EarleyParser(DottedRules rules, size_t max_items_held, Meter& meter)
    : max_items(max_items_held), rules_(std::move(rules)) {
    rules_.validate();
    rules_bytes_ = vector_bytes(rules_.next_sym) + vector_bytes(rules_.lhs) +
                   vector_bytes(rules_.nullable) + vector_bytes(rules_.first_dotted);
    for (const auto& first : rules_.first_dotted) rules_bytes_ += vector_bytes(first);
    predictions_.resize(rules_.first_dotted.size());
    predicted_.assign(rules_.first_dotted.size(), 0);
    root_ = close({}, rules_.start, meter);
}

EarleyParser::~EarleyParser() { drop_scans(); }

size_t EarleyParser::heap_bytes() const {
    // the interned nodes' keys: their items sorted (`items_held` of them)
    const size_t keys = items_held * sizeof(Item) + interned_.size() * kMallocOverhead;
    return rules_bytes_ + vector_bytes(predictions_) + predictions_bytes_ +
           hash_bytes(interned_) + keys + vector_bytes(scanned_) + vector_bytes(items_) +
           vector_bytes(agenda_) + hash_bytes(seen_) + vector_bytes(predicted_) +
           vector_bytes(predicted_list_) + size_t(std::max<int64_t>(0, node_bytes_->load()));
}

void EarleyParser::drop_scans() {
    for (auto& weak : scanned_)
        if (NodeRef node = weak.lock()) {
            std::map<std::vector<int32_t>, NodeRef> scans;
            scans.swap(node->scans);  // released after the node no longer points at them
            node->scan_keys = 0;
            node->recount();
        }
    scanned_.clear();
}

void EarleyParser::forget() {
    drop_scans();
    interned_.clear();
    items_held = 0;
    ++forgotten;
}

NodeRef EarleyParser::scan(const NodeRef& node, const std::vector<int32_t>& lexemes,
                           Meter& meter) {
    auto found = node->scans.find(lexemes);
    if (found != node->scans.end()) return found->second;
    std::vector<Item> kernel;
    for (const Item& item : node->items) {
        int32_t sym = rules_.next_sym[size_t(item.dotted)];
        if (sym >= 0 || sym == kRuleEnd) continue;
        if (std::binary_search(lexemes.begin(), lexemes.end(), ~sym))
            kernel.push_back({item.dotted + 1, item.origin ? item.origin : node.get()});
    }
    NodeRef result = kernel.empty() ? nullptr : close(kernel, -1, meter);
    if (node->scans.empty()) scanned_.push_back(node);  // (after `close`, which may forget)
    node->scans.emplace(lexemes, result);
    node->scan_keys += copy_bytes(lexemes);
    node->recount();
    return result;
}

std::pair<const std::pair<int32_t, Item>*, const std::pair<int32_t, Item>*> EarleyParser::waiting(
    ChartNode& node, int32_t a) const {
    if (!node.waiting_built) {
        for (const Item& item : node.items) {
            int32_t sym = rules_.next_sym[size_t(item.dotted)];
            if (sym >= 0) node.waiting.emplace_back(sym, item);
        }
        std::stable_sort(node.waiting.begin(), node.waiting.end(),
                         [](const auto& x, const auto& y) { return x.first < y.first; });
        node.waiting_built = true;
        node.recount();
    }
    auto range = std::equal_range(node.waiting.begin(), node.waiting.end(),
                                  std::make_pair(a, Item{0, nullptr}),
                                  [](const auto& x, const auto& y) { return x.first < y.first; });
    const auto* base = node.waiting.data();
    return {base + (range.first - node.waiting.begin()), base + (range.second - node.waiting.begin())};
}

const EarleyParser::Prediction& EarleyParser::prediction(int32_t a, Meter& meter) {
    auto& slot = predictions_[size_t(a)];
    if (slot) return *slot;
    auto found = std::make_unique<Prediction>();
    std::vector<uint8_t> in(rules_.first_dotted.size(), 0);
    std::unordered_set<int32_t> added;
    std::vector<int32_t> stack{a};
    in[size_t(a)] = 1;
    found->predicted.push_back(a);
    while (!stack.empty()) {
        const auto& first = rules_.first_dotted[size_t(stack.back())];
        stack.pop_back();
        meter.burn(1 + int64_t(first.size()));
        for (int32_t d : first) {
            while (true) {
                if (added.insert(d).second) found->items.push_back(d);
                int32_t sym = rules_.next_sym[size_t(d)];
                if (sym < 0) break;  // a lexeme or the end
                if (!in[size_t(sym)]) {
                    in[size_t(sym)] = 1;
                    found->predicted.push_back(sym);
                    stack.push_back(sym);
                }
                if (!rules_.nullable[size_t(sym)]) break;
                ++d;
            }
        }
    }
    predictions_bytes_ += sizeof(Prediction) + kMallocOverhead + vector_bytes(found->items) +
                          vector_bytes(found->predicted);
    slot = std::move(found);
    return *slot;
}

void EarleyParser::add_prediction(int32_t a, Meter& meter) {
    const Prediction& p = prediction(a, meter);
    for (int32_t d : p.items)
        if (seen_.insert({d, nullptr}).second) items_.push_back({d, nullptr});
    for (int32_t b : p.predicted)
        if (!predicted_[size_t(b)]) {
            predicted_[size_t(b)] = 1;
            predicted_list_.push_back(b);
        }
}

NodeRef EarleyParser::close(const std::vector<Item>& kernel, int32_t predict, Meter& meter) {
    const auto& next_sym = rules_.next_sym;
    const auto& lhs = rules_.lhs;
    items_.clear();
    seen_.clear();
    for (int32_t b : predicted_list_) predicted_[size_t(b)] = 0;
    predicted_list_.clear();
    agenda_.assign(kernel.begin(), kernel.end());
    if (predict >= 0) add_prediction(predict, meter);
    while (!agenda_.empty()) {
        const Item item = agenda_.back();
        agenda_.pop_back();
        if (!seen_.insert(item).second) continue;
        meter.burn(1);
        items_.push_back(item);
        const int32_t sym = next_sym[size_t(item.dotted)];
        if (sym == kRuleEnd) {  // complete: advance the items of the origin waiting for lhs
            auto [first, last] = waiting(*item.origin, lhs[size_t(item.dotted)]);
            for (auto* w = first; w != last; ++w)
                agenda_.push_back(
                    {w->second.dotted + 1, w->second.origin ? w->second.origin : item.origin});
        } else if (sym >= 0) {
            if (!predicted_[size_t(sym)]) add_prediction(sym, meter);
            if (rules_.nullable[size_t(sym)]) agenda_.push_back({item.dotted + 1, item.origin});
        }
    }
    meter.burn(1 + int64_t(kernel.size()));
    std::vector<Item> key = items_;
    std::sort(key.begin(), key.end());
    auto found = interned_.find(key);
    if (found != interned_.end()) return found->second;
    if (items_held + items_.size() > max_items) forget();
    items_held += items_.size();
    auto node = std::make_shared<ChartNode>();
    node->items = items_;
    for (const Item& item : items_) {
        const int32_t sym = next_sym[size_t(item.dotted)];
        if (sym < 0 && sym != kRuleEnd) node->expected.push_back(~sym);
        if (item.dotted == rules_.accept_item) node->accepts = true;
    }
    std::sort(node->expected.begin(), node->expected.end());
    node->expected.erase(std::unique(node->expected.begin(), node->expected.end()),
                         node->expected.end());
    std::vector<ChartNode*> distinct;
    for (const Item& item : items_)
        if (item.origin) distinct.push_back(item.origin);
    std::sort(distinct.begin(), distinct.end());
    distinct.erase(std::unique(distinct.begin(), distinct.end()), distinct.end());
    for (ChartNode* o : distinct) node->origins.push_back(o->shared_from_this());
    node->counter = node_bytes_;
    node->recount();
    interned_.emplace(std::move(key), node);
    return node;
}

}  // namespace constrain
