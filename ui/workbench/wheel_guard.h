#pragma once
// Settings change only when the user means it: a spin box or combo box inside a scrolling dock takes
// the mouse wheel only once it has focus (clicked or tabbed into); before that the wheel scrolls the
// dock, as it does everywhere else on the page.
class QWidget;

namespace mosaic::ui {

// Guards every spin box and combo box under `root` (and gives them click-and-tab focus).
void guard_wheel(QWidget* root);

}  // namespace mosaic::ui
