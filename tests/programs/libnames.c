// A shared library with a global of its own, for the naming test.
int lib_value[4];
int lib_hidden_counter;

void lib_touch(void) {
    volatile int *p = &lib_hidden_counter;
    for (int i = 0; i < 6; i++) {
        *p = i; // @lib-store
    }
}
