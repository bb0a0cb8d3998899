/*
 * lr_scheduler.h - learning rate per iteration (0-based), nntrainer's
 * schedulers:
 *   constant:    lr
 *   exponential: lr * decay_rate ^ (it / decay_steps)   (real exponent)
 *   step:        learning_rate[k] where k = number of milestones <= it
 *   cosine:      min + (max - min) * (1 + cos(pi * min(it, T) / T)) / 2,
 *                T = decay_steps (Loshchilov & Hutter 2017, no restarts)
 * Without a [LearningRateScheduler] section: constant at the optimizer's
 * learning_rate. Pure function; any thread.
 */
#ifndef NTO_LR_SCHEDULER_H
#define NTO_LR_SCHEDULER_H

#include "config.h"

/* Learning rate at iteration it (>= 0). */
double nto_lr_at(const nto_lr_conf *s, const nto_opt_conf *o, long it);

#endif /* NTO_LR_SCHEDULER_H */
