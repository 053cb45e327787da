#pragma once
// paco: every CPU header of the library in one include. The transports with their own
// dependencies are included on their own (paco/net/asio_tcp.hpp: link paco::asio;
// paco/net/mpi.hpp: link paco::mpi), as are the CUDA kernels (kernels/paco).
#include "paco/collectives/collectives.hpp"
#include "paco/compress/compress.hpp"
#include "paco/core/core.hpp"
#include "paco/io/io.hpp"
#include "paco/net/net.hpp"
#include "paco/nn/nn.hpp"
#include "paco/optim/optim.hpp"
#include "paco/outer/outer.hpp"
#include "paco/path/path.hpp"
#include "paco/pipeline/pipeline.hpp"
#include "paco/place/place.hpp"
#include "paco/route/route.hpp"
#include "paco/store/store.hpp"
#include "paco/train/train.hpp"
