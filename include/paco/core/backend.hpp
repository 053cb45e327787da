#pragma once
// Backend tags. A backend is a type that travels in slice<T,B>, buffer<T,B> and context<B>;
// algorithms are written once and dispatch on the tag, never on #ifdef.

#include <concepts>

namespace paco {

struct host {
  static constexpr const char* name = "host";
};
struct cuda {
  static constexpr const char* name = "cuda";
};

template <class B>
concept Backend = std::same_as<B, host> || std::same_as<B, cuda>;

}  // namespace paco
