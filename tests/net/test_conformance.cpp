// The shared Transport conformance suite, instantiated for every transport this build has.
#include "world.hpp"
#ifdef PACO_TEST_ASIO
#include "tcp_world.hpp"
#define PACO_TEST_WORLDS paco::testing::inproc_world, paco::testing::tcp_world
#else
#define PACO_TEST_WORLDS paco::testing::inproc_world
#endif
#include "conformance.hpp"
