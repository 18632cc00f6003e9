/*
 * gd_gpu_cmd.c - a device's command FIFO: the only channel from the loop thread and CUDA's
 * callback thread to the device's worker (see gd_gpu_shared.h). Commands are intrusive nodes
 * embedded in what they concern, so pushing never allocates. Both ends hold the device's mu.
 */
#include "gd_gpu_shared.h"

void gd__gpu_cmd_push(gd__gpu_dev *dev, gd__gpu_cmd *cmd) {
  cmd->next = NULL;
  if (dev->q_tail)
    dev->q_tail->next = cmd;
  else
    dev->q_head = cmd;
  dev->q_tail = cmd;
  pthread_cond_signal(&dev->cv);
}

gd__gpu_cmd *gd__gpu_cmd_pop(gd__gpu_dev *dev) {
  gd__gpu_cmd *cmd = dev->q_head;
  if (!cmd)
    return NULL;
  dev->q_head = cmd->next;
  if (!dev->q_head)
    dev->q_tail = NULL;
  return cmd;
}
