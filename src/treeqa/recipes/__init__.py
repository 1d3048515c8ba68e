"""Recipes: data -> model -> fit -> checkpoint -> evaluate -> predict, one module per task."""
