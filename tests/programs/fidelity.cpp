#include "fidelity.c"
