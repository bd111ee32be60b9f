from patchkit.cli import main

main()
