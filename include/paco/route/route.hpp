#pragma once
// paco/route: document routers (k-means, product k-means, discriminative logistic) and features.
#include "paco/route/assign.hpp"
#include "paco/route/concepts.hpp"
#include "paco/route/evaluate.hpp"
#include "paco/route/features.hpp"
#include "paco/route/kmeans.hpp"
#include "paco/route/logistic.hpp"
#include "paco/route/routing_rules.hpp"
#include "paco/route/scored_docs.hpp"
#include "paco/route/specialisation.hpp"
