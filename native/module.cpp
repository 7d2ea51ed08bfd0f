// Python bindings of the native engine core: `constrain.engine.native`.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <unordered_map>

#include "admits.hpp"
#include "json_keys.hpp"
#include "lexer.hpp"
#include "trie.hpp"

namespace py = pybind11;
using namespace constrain;

namespace {

template <typename T>
using Array = py::array_t<T, py::array::c_style | py::array::forcecast>;

template <typename T>
std::vector<T> to_vector(const Array<T>& a) {
    return std::vector<T>(a.data(), a.data() + a.size());
}

template <typename T>
py::array_t<T> to_array(std::vector<T>&& v) {
    auto* owned = new std::vector<T>(std::move(v));
    py::capsule free(owned, [](void* p) { delete static_cast<std::vector<T>*>(p); });
    return py::array_t<T>({py::ssize_t(owned->size())}, {py::ssize_t(sizeof(T))}, owned->data(),
                          free);
}

LexemeDFA lexeme_from(const py::tuple& spec) {
    // (table (n, own classes) int32, accepting bool (n,), own class of each joint class,
    //  start, priority, owners [ids], blocked bool (256,) or None)
    LexemeDFA dfa;
    auto table = spec[0].cast<Array<int32_t>>();
    if (table.ndim() != 2) throw py::value_error("a lexeme table must be 2-D");
    dfa.n_own = int(table.shape(1));
    dfa.table = to_vector(table);
    auto accepting = spec[1].cast<Array<uint8_t>>();
    dfa.accepting = to_vector(accepting);
    if (dfa.accepting.size() != size_t(table.shape(0)))
        throw py::value_error("accepting and table disagree on the number of states");
    dfa.own_of_joint = to_vector(spec[2].cast<Array<int32_t>>());
    for (int32_t own : dfa.own_of_joint)
        if (own < 0 || own >= dfa.n_own) throw py::value_error("own class out of range");
    for (int32_t t : dfa.table)
        if (t < 0 || size_t(t) >= dfa.accepting.size())
            throw py::value_error("a lexeme transition leads outside its table");
    dfa.start = spec[3].cast<int32_t>();
    if (dfa.start < 0 || size_t(dfa.start) >= dfa.accepting.size())
        throw py::value_error("a lexeme start state is outside its table");
    dfa.priority = spec[4].cast<int>();
    dfa.owners = spec[5].cast<std::vector<int>>();
    if (!spec[6].is_none()) {
        auto blocked = spec[6].cast<Array<uint8_t>>();
        if (blocked.size() != 256) throw py::value_error("blocked must have 256 entries");
        for (int b = 0; b < 256; ++b) dfa.blocked[size_t(b)] = blocked.data()[b];
    }
    if (spec.size() > 7 && !spec[7].is_none()) {  // (start inside a string, own class of bytes)
        auto escapes = spec[7].cast<py::tuple>();
        if (escapes.size() != 2) throw py::value_error("escapes are (in_string, own_of_byte)");
        bool in_string = escapes[0].cast<bool>();
        auto own_of_byte = escapes[1].cast<Array<int32_t>>();
        if (own_of_byte.size() != 256) throw py::value_error("own_of_byte must have 256 entries");
        std::array<int32_t, 256> own{};
        std::vector<uint8_t> seen(size_t(dfa.n_own), 0);
        for (int b = 0; b < 256; ++b) {
            own[size_t(b)] = own_of_byte.data()[b];
            if (own[size_t(b)] < 0 || own[size_t(b)] >= dfa.n_own)
                throw py::value_error("own class out of range");
            seen[size_t(own[size_t(b)])] = 1;
        }
        for (unsigned char c : std::string("\\u0123456789abcdefABCDEFbfnrt\"/"))
            for (int b = 0; b < 256; ++b)
                if (b != c && own[size_t(b)] == own[size_t(c)])
                    throw py::value_error("a byte an escape reads must have a class of its own");
        dfa.escapes = std::make_shared<JsonEscapes>(std::move(dfa.table), dfa.n_own,
                                                    int32_t(dfa.accepting.size()), dfa.start,
                                                    in_string, own);
        dfa.table.clear();
    }
    return dfa;
}

Trie trie_from(const py::object& t) {
    Trie trie;
    trie.byte = to_vector(t.attr("byte").cast<Array<uint8_t>>());
    trie.depth = to_vector(t.attr("depth").cast<Array<int32_t>>());
    trie.subtree_end = to_vector(t.attr("subtree_end").cast<Array<int64_t>>());
    trie.token_start = to_vector(t.attr("token_start").cast<Array<int64_t>>());
    trie.tokens = to_vector(t.attr("tokens").cast<Array<int64_t>>());
    trie.child_start = to_vector(t.attr("child_start").cast<Array<int64_t>>());
    trie.children = to_vector(t.attr("children").cast<Array<int64_t>>());
    return trie;
}

// Every token's bytes, concatenated (a vocabulary's texts, copied once).
struct TokenTexts {
    std::vector<uint8_t> bytes;
    std::vector<int64_t> offsets{0};  // token t is bytes[offsets[t], offsets[t + 1])
};

TokenTexts token_texts_from(const py::list& texts) {
    TokenTexts out;
    for (const py::handle& text : texts) {
        std::string data = text.cast<std::string>();
        out.bytes.insert(out.bytes.end(), data.begin(), data.end());
        out.offsets.push_back(int64_t(out.bytes.size()));
    }
    return out;
}

// The tokens among `tokens` that complete a repeated key when read from a scanner state
// (see json_keys.hpp). Keys are compared as the Python check compares them: `loads` (json.loads)
// of the key's text against the `seen` frozenset of each of the caller's object frames.
py::array_t<int64_t> json_key_refusals(const TokenTexts& texts, const Array<int64_t>& tokens,
                                       int mode, bool escaped, const py::bytes& key,
                                       const py::list& frames, const py::object& loads) {
    if (mode < kValue || mode > kEnd) throw py::value_error("scanner mode out of range");
    KeyScan base;
    base.mode = mode;
    base.escaped = escaped;
    base.key = std::string(key);
    std::vector<py::object> seen;  // per caller frame: its keys (a frozenset) or None
    for (const py::handle& frame : frames) {
        auto pair = frame.cast<py::tuple>();
        if (pair.size() != 2) throw py::value_error("a frame is (is_object, seen keys)");
        base.frames.push_back(JsonFrame{int64_t(seen.size()), pair[0].cast<bool>()});
        seen.push_back(py::reinterpret_borrow<py::object>(pair[1]));
    }
    base.next_id = int64_t(seen.size());
    const int64_t n_tokens = int64_t(texts.offsets.size()) - 1;
    std::vector<int64_t> refused;
    for (py::ssize_t k = 0; k < tokens.size(); ++k) {
        int64_t t = tokens.data()[k];
        if (t < 0 || t >= n_tokens) throw py::index_error("token id out of range");
        KeyScan scan = base;
        std::unordered_map<int64_t, py::set> added;  // keys completed inside this token
        auto repeats = [&](int64_t frame, const std::string& text) {
            py::object parsed = loads(py::bytes("\"" + text + "\""));
            if (size_t(frame) < seen.size() && !seen[size_t(frame)].is_none()) {
                int found = PySet_Contains(seen[size_t(frame)].ptr(), parsed.ptr());
                if (found < 0) throw py::error_already_set();
                if (found) return true;
            }
            py::set& keys = added[frame];
            if (keys.contains(parsed)) return true;
            keys.add(parsed);
            return false;
        };
        const uint8_t* data = texts.bytes.data() + texts.offsets[size_t(t)];
        size_t n = size_t(texts.offsets[size_t(t) + 1] - texts.offsets[size_t(t)]);
        if (!scan_keys(scan, data, n, repeats)) refused.push_back(t);
    }
    return to_array(std::move(refused));
}

}  // namespace

PYBIND11_MODULE(native, m) {
    m.doc() = "The native engine core: the lexer's product DFA, the vocabulary trie walks, JSON key checks.";
    // the module attribute keeps the type alive for the translator below
    static PyObject* limit_type = py::exception<LexerLimit>(m, "LexerLimit").ptr();
    py::register_exception_translator([](std::exception_ptr p) {
        try {
            if (p) std::rethrow_exception(p);
        } catch (const LexerLimit& e) {
            py::object err = py::reinterpret_borrow<py::object>(limit_type)(py::str(e.what()));
            err.attr("lexemes") = py::cast(e.lexemes);
            PyErr_SetObject(limit_type, err.ptr());
        }
    });

    py::class_<Trie>(m, "Trie")
        .def(py::init(&trie_from), py::arg("trie"));

    py::class_<DFATable>(m, "DFATable")
        .def(py::init([](const Array<int32_t>& table) {
                 if (table.ndim() != 2 || table.shape(1) != 256)
                     throw py::value_error("a DFA table must be (n, 256)");
                 DFATable out{to_vector(table), table.shape(0)};
                 for (int32_t t : out.next)
                     if (t < 0 || t >= out.n_states)
                         throw py::value_error("a transition leads outside the table");
                 return out;
             }),
             py::arg("table"))
        .def(
            "tokens",
            [](const DFATable& dfa, const Trie& trie, int32_t state) {
                if (state < 0 || state >= dfa.n_states) throw py::value_error("state out of range");
                return to_array(walk_dfa(trie, dfa.next.data(), dfa.n_states, state, nullptr));
            },
            py::arg("trie"), py::arg("state"),
            "The tokens whose bytes lead from `state` to a live state (a trie walk).")
        .def(
            "admits",
            [](const DFATable& dfa, int32_t state, const DFATable& language, int32_t start) {
                if (state < 0 || state >= dfa.n_states) throw py::value_error("state out of range");
                if (start < 0 || start >= language.n_states)
                    throw py::value_error("language start out of range");
                const int32_t* next = dfa.next.data();
                return admits([next](int32_t q, uint8_t b) { return next[size_t(q) * 256 + b]; },
                              state, language, start);
            },
            py::arg("state"), py::arg("language"), py::arg("language_start"),
            "Whether every string of `language` keeps this DFA live from `state`.");

    py::class_<Lexer>(m, "Lexer")
        .def(py::init([](const Array<int64_t>& classes, int n_joint, const py::list& lexemes,
                         size_t max_states) {
                 if (classes.size() != 256) throw py::value_error("classes must have 256 entries");
                 std::array<int32_t, 256> cls{};
                 for (int b = 0; b < 256; ++b) {
                     cls[size_t(b)] = int32_t(classes.data()[b]);
                     if (cls[size_t(b)] < 0 || cls[size_t(b)] >= n_joint)
                         throw py::value_error("byte class out of range");
                 }
                 std::vector<LexemeDFA> dfas;
                 for (const auto& spec : lexemes) {
                     dfas.push_back(lexeme_from(spec.cast<py::tuple>()));
                     if (dfas.back().own_of_joint.size() != size_t(n_joint))
                         throw py::value_error("own classes must cover every joint class");
                     for (int owner : dfas.back().owners)
                         if (owner < 0 || size_t(owner) >= size_t(py::len(lexemes)))
                             throw py::value_error("keyword owner out of range");
                 }
                 return Lexer(cls, n_joint, std::move(dfas), max_states);
             }),
             py::arg("classes"), py::arg("n_joint"), py::arg("lexemes"), py::arg("max_states"))
        .def_property_readonly("n_states", &Lexer::n_states)
        .def_property_readonly("n_tags", &Lexer::n_tags)
        .def("start_of", &Lexer::start_of, py::arg("lexemes"))
        .def(
            "row",
            [](Lexer& lx, int32_t state) {
                if (state < 0 || size_t(state) >= lx.n_states())
                    throw py::value_error("state out of range");
                const int32_t* row = lx.row(state);
                std::vector<int32_t> out(256);
                for (int b = 0; b < 256; ++b) out[size_t(b)] = row[lx.classes()[size_t(b)]];
                return out;
            },
            py::arg("state"))
        .def(
            "tag_of",
            [](const Lexer& lx, int32_t state) {
                if (state < 0 || size_t(state) >= lx.n_states())
                    throw py::value_error("state out of range");
                return lx.tag(state);
            },
            py::arg("state"))
        .def(
            "tag_set",
            [](const Lexer& lx, int32_t tag) {
                if (tag < 0 || size_t(tag) >= lx.n_tags()) throw py::value_error("tag out of range");
                return lx.tag_set(tag);
            },
            py::arg("tag"))
        .def(
            "ends_before",
            [](const Lexer& lx, int32_t tag) {
                if (tag < 0 || size_t(tag) >= lx.n_tags()) throw py::value_error("tag out of range");
                std::vector<uint8_t> out(256);
                for (int b = 0; b < 256; ++b) out[size_t(b)] = lx.can_end(tag, uint8_t(b));
                return to_array(std::move(out));
            },
            py::arg("tag"))
        .def(
            "key",
            [](const Lexer& lx, int32_t state) {
                if (state < 0 || size_t(state) >= lx.n_states())
                    throw py::value_error("state out of range");
                return lx.key(state);
            },
            py::arg("state"))
        .def(
            "walk",
            [](Lexer& lx, const Trie& trie, int32_t state, const Array<int64_t>& starts,
               bool end_at_start) {
                if (state <= 0 || size_t(state) >= lx.n_states())
                    throw py::value_error("state out of range");
                std::vector<int64_t> roots = to_vector(starts);
                for (int64_t r : roots)
                    if (r <= 0 || size_t(r) >= trie.n_nodes())
                        throw py::value_error("start node out of range");
                Piece piece = walk_lexer(lx, trie, state, roots, end_at_start);
                py::list ends;
                for (auto& [tag, nodes] : piece.ends)
                    ends.append(py::make_tuple(tag, to_array(std::move(nodes))));
                return py::make_tuple(to_array(std::move(piece.tokens)), ends);
            },
            py::arg("trie"), py::arg("state"), py::arg("starts"), py::arg("end_at_start"))
        .def(
            "admits",
            [](Lexer& lx, int32_t state, const DFATable& language, int32_t start) {
                if (state <= 0 || size_t(state) >= lx.n_states())
                    throw py::value_error("state out of range");
                if (start < 0 || start >= language.n_states)
                    throw py::value_error("language start out of range");
                return admits([&lx](int32_t q, uint8_t b) { return lx.next(q, b); }, state,
                              language, start);
            },
            py::arg("state"), py::arg("language"), py::arg("language_start"),
            "Whether every string of `language` keeps the lexer live from `state` (inside the "
            "lexemes in progress, no boundary).")
        .def(
            "lexeme_admits",
            [](Lexer& lx, int lexeme, int32_t at, const DFATable& language, int32_t start) {
                if (lexeme < 0 || size_t(lexeme) >= lx.n_lexemes())
                    throw py::value_error("lexeme out of range");
                LexemeDFA& dfa = lx.lexeme(lexeme);
                if (at <= 0 || size_t(at) >= dfa.n_states())
                    throw py::value_error("lexeme state out of range");
                if (start < 0 || start >= language.n_states)
                    throw py::value_error("language start out of range");
                const auto& classes = lx.classes();
                return admits(
                    [&](int32_t q, uint8_t b) {
                        return dfa.next(q, dfa.own_of_joint[size_t(classes[b])]);
                    },
                    at, language, start);
            },
            py::arg("lexeme"), py::arg("at"), py::arg("language"), py::arg("language_start"),
            "Whether every string of `language` keeps one lexeme's DFA live from state `at`.");

    py::class_<TokenTexts>(m, "TokenTexts", "Every token's bytes, for scans of token texts.")
        .def(py::init(&token_texts_from), py::arg("texts"))
        .def("__len__", [](const TokenTexts& t) { return t.offsets.size() - 1; });

    m.def("json_key_refusals", &json_key_refusals, py::arg("texts"), py::arg("tokens"),
          py::arg("mode"), py::arg("escaped"), py::arg("key"), py::arg("frames"), py::arg("loads"),
          "The tokens that complete a repeated JSON key from a key-checking scanner's state.");
}
