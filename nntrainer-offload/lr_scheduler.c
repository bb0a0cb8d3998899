/* lr_scheduler.c - learning rate schedules. See lr_scheduler.h. */
#include "lr_scheduler.h"

#include <math.h>

double nto_lr_at(const nto_lr_conf *s, const nto_opt_conf *o, long it) {
  if (!s->given)
    return o->learning_rate;
  switch (s->kind) {
  case NTO_LR_CONSTANT:
    return s->learning_rate[0];
  case NTO_LR_EXPONENTIAL:
    return s->learning_rate[0] *
           pow(s->decay_rate, (double)it / (double)s->decay_steps);
  case NTO_LR_STEP: {
    int k = 0;
    while (k < s->n_steps && it >= s->iteration[k])
      k++;
    return s->learning_rate[k];
  }
  case NTO_LR_COSINE: {
    double T = (double)s->decay_steps;
    double x = it < s->decay_steps ? (double)it : T;
    return s->min_learning_rate + (s->max_learning_rate - s->min_learning_rate) *
                                      (1.0 + cos(M_PI * x / T)) / 2.0;
  }
  }
  return o->learning_rate;
}
