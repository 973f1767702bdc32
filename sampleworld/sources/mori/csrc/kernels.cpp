// Sample MoRI kernels: template-heavy C++ that takes the compiler about a second per kernel set (at
// -O2, MORI_LANES=400), so the build has real compiles for ccache to cache. setup.py compiles this
// file once per set, MORI_KERNEL_SET=0..N-1, and links the objects into mori/libmori_kernels.so.
#include <cstdint>
#include <utility>

#ifndef MORI_KERNEL_SET
#define MORI_KERNEL_SET 0
#endif
#ifndef MORI_LANES
#define MORI_LANES 400
#endif
#define MORI_JOIN2(a, b) a##b
#define MORI_JOIN(a, b) MORI_JOIN2(a, b)

namespace mori {

template <std::uint64_t N>
struct Mix {
    static constexpr std::uint64_t value = (Mix<N - 1>::value ^ (N * 0x9E3779B97F4A7C15ull)) * 0xBF58476D1CE4E5B9ull;
};
template <>
struct Mix<0> {
    static constexpr std::uint64_t value = 0x94D049BB133111EBull + MORI_KERNEL_SET;
};

template <std::size_t Lane, std::size_t... I>
constexpr std::uint64_t fold(std::index_sequence<I...>) {
    return (Mix<Lane * 8 + MORI_KERNEL_SET + I>::value ^ ...);
}

template <std::size_t Lane>
std::uint64_t lane() {
    return fold<Lane>(std::make_index_sequence<8>{}) + Lane;
}

template <std::size_t... L>
std::uint64_t all_lanes(std::index_sequence<L...>) {
    return (lane<L>() ^ ...);
}

}  // namespace mori

// One entry point per set: mori_kernel_set_0, mori_kernel_set_1, ... (mori.ops.kernel_checksum calls them).
extern "C" std::uint64_t MORI_JOIN(mori_kernel_set_, MORI_KERNEL_SET)() {
    return mori::all_lanes(std::make_index_sequence<MORI_LANES>{});
}
