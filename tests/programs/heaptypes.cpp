// Naming test: heap blocks named after their element type (Node.next, Point[3].y).
#include <cstdio>
#include <vector>

struct Node {
    long key;
    Node *next;
};
struct Point {
    int x;
    int y;
};

void *volatile sink;

// noexcept: clang's ThreadSanitizer pass keeps the call site's allocation type
// only on calls it does not turn into invokes (see docs/naming.md).
__attribute__((noinline)) Node *make_node(long key, Node *next) noexcept {
    Node *n = new Node; // @new-node
    sink = n;
    volatile Node *v = n;
    v->key = key;   // @node-key
    v->next = next; // @node-next
    return n;
}

int main() {
    Node *head = nullptr;
    for (int i = 0; i < 5; i++) head = make_node(i, head);
    std::vector<Point> pts(8); // @vector
    sink = pts.data();
    volatile Point *vp = pts.data();
    for (int i = 0; i < 8; i++) vp[i].y = i; // @point-y
    long s = 0;
    for (int i = 0; i < 8; i++) s += vp[i].y; // @point-y-load
    s += vp[3].y;                             // @point-3-y
    for (volatile Node *n = head; n; n = n->next) s += n->key;
    std::printf("%ld\n", s);
    while (head) {
        Node *n = head->next;
        delete head;
        head = n;
    }
    return 0;
}
