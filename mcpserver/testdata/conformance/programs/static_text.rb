"This is the content of the static text resource."
