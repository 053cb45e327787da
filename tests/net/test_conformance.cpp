// The shared Transport conformance suite, instantiated for every transport this build has.
#include "world.hpp"
#if defined(PACO_TEST_ASIO) && PACO_WITH_TLS
#include "tls_world.hpp"
#define PACO_TEST_WORLDS                                                                   \
  paco::testing::inproc_world, paco::testing::tcp_world, paco::testing::striped_tcp_world, \
      paco::testing::tls_world
#elif defined(PACO_TEST_ASIO)
#include "tcp_world.hpp"
#define PACO_TEST_WORLDS \
  paco::testing::inproc_world, paco::testing::tcp_world, paco::testing::striped_tcp_world
#else
#define PACO_TEST_WORLDS paco::testing::inproc_world
#endif
#include "conformance.hpp"
