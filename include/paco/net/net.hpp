#pragma once
// paco/net: the Transport concept and its dependency-free models and wire format.
// The Asio and MPI models need their own targets and are included on their own:
//   #include "paco/net/asio_tcp.hpp"   (link paco::asio)
//   #include "paco/net/mpi.hpp"        (link paco::mpi)
#include "paco/net/concepts.hpp"
#include "paco/net/crc32c.hpp"
#include "paco/net/inproc.hpp"
#include "paco/net/launch_env.hpp"
#include "paco/net/wire.hpp"
