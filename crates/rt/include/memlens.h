/* memlens annotation API.
 *
 * Link the program with libmemlens_rt.a (see the memlens-rt crate docs). Every
 * function is a cheap no-op when the program runs without MEMLENS_OUTPUT.
 */
#ifndef MEMLENS_H
#define MEMLENS_H

#ifdef __cplusplus
extern "C" {
#endif

/* Tags the calling thread with a number of the program's choosing. */
void memlens_register_thread(long id);
/* Names the calling thread in the trace (the OS thread name is not changed). */
void memlens_thread_name(const char *name);
/* With MEMLENS_ROI=1, memory accesses are recorded only between these
   (process-wide); function, allocation and thread events always are. */
void memlens_roi_begin(void);
void memlens_roi_end(void);
/* Stop / resume recording accesses and function events (process-wide). */
void memlens_trace_on(void);
void memlens_trace_off(void);

#ifdef __cplusplus
}
#endif

#endif /* MEMLENS_H */
