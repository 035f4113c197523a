"""workflows.paths: a client's working directory checked as a string, then resolved to a git root and project id."""

import os
import subprocess
from pathlib import Path

import pytest

from workflows import paths
from workflows.paths import (
    PROTECTED_PREFIXES,
    LocalProject,
    ScopeError,
    cwd_normalize,
    git_remote_url,
    git_root_find,
    is_within,
    project_id_derive,
    project_id_from_remote,
    server_path_resolve,
)


def git(*args: str, cwd: Path) -> None:
    subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True,
                   env={**os.environ, "GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1"})


def git_repo(path: Path, *, remotes: dict[str, str] | None = None) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    git("init", "-q", cwd=path)
    for name, url in (remotes or {}).items():
        git("remote", "add", name, url, cwd=path)
    return path


def scope_error_code(cwd: str) -> str:
    with pytest.raises(ScopeError) as caught:
        server_path_resolve(cwd)
    return caught.value.code


# cwd_normalize


@pytest.mark.parametrize("cwd", ["", "   ", "relative/dir", "./here", "~/project", "C:\\Users\\me", "/tmp/a\x00b"])
def test_it_refuses_a_path_that_is_not_absolute(cwd):
    with pytest.raises(ScopeError) as caught:
        cwd_normalize(cwd)
    assert caught.value.code == "NOT_ABSOLUTE"
    assert caught.value.http_status == 400


def test_the_refusal_names_the_path():
    with pytest.raises(ScopeError) as caught:
        cwd_normalize("projects/app")
    assert "'projects/app'" in caught.value.message


@pytest.mark.parametrize(("cwd", "expected"), [
    ("/home/me/app/", "/home/me/app"),
    ("/home//me/./app", "/home/me/app"),
    ("/home/me/tmp/../app", "/home/me/app"),
    ("//home/me/app", "/home/me/app"),
    ("///home/me/app", "/home/me/app"),
    ("/", "/"),
    ("/..", "/"),
])
def test_it_normalizes_an_absolute_path(cwd, expected):
    assert cwd_normalize(cwd) == expected


@pytest.mark.parametrize("cwd", ["/etc", "/etc/nginx", "/usr/local/src/app", "/proc/1", "/System/Library",
                                 "/private/etc/hosts", "/private/var/db", "/var/lib/docker", "/run/user/1000",
                                 "/home/me/../../etc/ssh"])
def test_it_refuses_a_protected_system_path(cwd):
    with pytest.raises(ScopeError) as caught:
        cwd_normalize(cwd)
    assert caught.value.code == "PROTECTED_PATH"
    assert cwd in caught.value.message


@pytest.mark.parametrize("cwd", ["/tmp/app", "/private/tmp/app", "/Users/me/app", "/home/me/app", "/etcetera/app",
                                 "/usrlocal", "/var/www/app", "/libraries/app"])
def test_it_accepts_paths_that_only_look_like_protected_ones(cwd):
    assert cwd_normalize(cwd) == cwd


def test_it_checks_a_path_without_touching_the_filesystem():
    assert cwd_normalize("/no/such/machine/path") == "/no/such/machine/path"


def test_the_protected_prefixes_include_the_system_roots_and_leave_temp_and_home_alone():
    assert {"/etc", "/usr", "/System", "/Library", "/private/var", "/run"} <= set(PROTECTED_PREFIXES)
    assert not {"/tmp", "/private/tmp", "/home", "/Users"} & set(PROTECTED_PREFIXES)


# is_within


@pytest.mark.parametrize(("path", "root", "expected"), [
    ("/a/b", "/a/b", True),
    ("/a/b/c", "/a/b", True),
    ("/a/bc", "/a/b", False),
    ("/a", "/a/b", False),
    ("/anything/at/all", "/", True),
    ("/", "/", True),
])
def test_it_tells_whether_a_path_lies_within_a_root(path, root, expected):
    assert is_within(path, root) is expected


# project_id_from_remote


@pytest.mark.parametrize(("url", "expected"), [
    ("git@github.com:Acme/App.git", "github.com/Acme/App"),
    ("git@GitHub.com:Acme/App.git", "github.com/Acme/App"),
    ("https://user:tok@github.com/acme/app.git/", "github.com/acme/app"),
    ("https://github.com/acme/app", "github.com/acme/app"),
    ("ssh://git@host.example:2222/acme/app", "host.example/acme/app"),
    ("git://host/a/b.git", "host/a/b"),
    ("https://gitlab.example.com/group/sub/app.git", "gitlab.example.com/group/sub/app"),
    ("/srv/git/app.git", "app"),
    ("../sibling/app", "app"),
    ("/srv/app/.git", "app"),
    ("file:///srv/git/app.git", "app"),
    ("  git@github.com:acme/app.git\n", "github.com/acme/app"),
])
def test_it_derives_a_project_id_from_a_remote_url(url, expected):
    assert project_id_from_remote(url) == expected


@pytest.mark.parametrize("url", ["", "   ", "https://github.com/", "https:///acme/app", "/", "file:///"])
def test_it_derives_nothing_from_an_empty_or_unparsable_url(url):
    assert project_id_from_remote(url) is None


def test_it_never_puts_credentials_in_a_project_id():
    project_id = project_id_from_remote("https://alice:s3cret-token@git.example.com:8443/acme/app.git")
    assert project_id == "git.example.com/acme/app"
    assert "s3cret" not in project_id
    assert "alice" not in project_id


# git_root_find and git_remote_url


def test_it_finds_the_git_root_above_a_nested_folder(tmp_path):
    repo = git_repo(tmp_path / "app")
    nested = repo / "src" / "deep"
    nested.mkdir(parents=True)
    assert git_root_find(nested) == repo
    assert git_root_find(repo) == repo


def test_it_finds_no_git_root_outside_a_repository(tmp_path):
    assert git_root_find(tmp_path) is None


def test_it_reads_the_origin_url_over_other_remotes(tmp_path):
    repo = git_repo(tmp_path / "app", remotes={"upstream": "git@github.com:up/app.git",
                                               "origin": "git@github.com:me/app.git"})
    assert git_remote_url(repo) == "git@github.com:me/app.git"


def test_it_falls_back_to_the_first_remote_with_a_url(tmp_path):
    repo = git_repo(tmp_path / "app", remotes={"upstream": "https://example.com/up/app.git"})
    assert git_remote_url(repo) == "https://example.com/up/app.git"


def test_it_reads_no_url_from_a_repository_without_remotes(tmp_path):
    assert git_remote_url(git_repo(tmp_path / "app")) is None


def test_it_reads_no_url_from_a_config_it_cannot_parse(tmp_path):
    repo = tmp_path / "app"
    (repo / ".git").mkdir(parents=True)
    (repo / ".git" / "config").write_text("[remote \"origin\"\nurl = this is not a config\n")
    assert git_remote_url(repo) is None


def test_it_reads_a_hand_written_config_with_indented_keys_and_a_valueless_key(tmp_path):
    repo = tmp_path / "app"
    (repo / ".git").mkdir(parents=True)
    (repo / ".git" / "config").write_text(
        "[core]\n\tbare\n\trepositoryformatversion = 0\n"
        "[remote \"fork\"]\n\tfetch = +refs/heads/*:refs/remotes/fork/*\n"
        "[remote \"mirror\"]\n\turl = https://mirror.example/acme/app.git\n"
    )
    assert git_remote_url(repo) == "https://mirror.example/acme/app.git"


def test_it_follows_a_worktree_git_file_to_the_shared_config(tmp_path):
    main = git_repo(tmp_path / "main", remotes={"origin": "git@github.com:acme/app.git"})
    git("-c", "user.name=t", "-c", "user.email=t@example.com", "commit", "-q", "--allow-empty", "-m", "init",
        cwd=main)
    git("worktree", "add", "-q", str(tmp_path / "feature"), cwd=main)
    worktree = tmp_path / "feature"
    assert (worktree / ".git").is_file()
    assert git_root_find(worktree / "nowhere-yet") == worktree
    assert git_remote_url(worktree) == "git@github.com:acme/app.git"


def test_it_follows_a_relative_gitdir_with_a_relative_commondir(tmp_path):
    shared = tmp_path / "store" / "app.git"
    (shared / "worktrees" / "wt").mkdir(parents=True)
    (shared / "config").write_text('[remote "origin"]\n\turl = ssh://git@host.example:2222/acme/app\n')
    (shared / "worktrees" / "wt" / "commondir").write_text("../..\n")
    worktree = tmp_path / "wt"
    worktree.mkdir()
    (worktree / ".git").write_text("gitdir: ../store/app.git/worktrees/wt\n")
    assert git_remote_url(worktree) == "ssh://git@host.example:2222/acme/app"
    assert project_id_derive(worktree) == "host.example/acme/app"


def test_it_reads_a_submodule_style_git_file_without_commondir(tmp_path):
    module_dir = tmp_path / "super" / ".git" / "modules" / "lib"
    module_dir.mkdir(parents=True)
    (module_dir / "config").write_text('[remote "origin"]\n\turl = https://github.com/acme/lib.git\n')
    sub = tmp_path / "super" / "lib"
    sub.mkdir()
    (sub / ".git").write_text(f"gitdir: {module_dir}\n")
    assert git_remote_url(sub) == "https://github.com/acme/lib.git"


def test_it_reads_no_url_when_the_git_file_points_nowhere(tmp_path):
    (tmp_path / ".git").write_text("gitdir: does/not/exist\n")
    assert git_remote_url(tmp_path) is None
    (tmp_path / ".git").write_text("not a gitdir line\n")
    assert git_remote_url(tmp_path) is None


# project_id_derive


def test_it_derives_the_project_id_from_the_remote(tmp_path):
    repo = git_repo(tmp_path / "checkout", remotes={"origin": "git@github.com:Acme/App.git"})
    assert project_id_derive(repo) == "github.com/Acme/App"


def test_it_uses_the_folder_name_for_a_repository_without_remote(tmp_path):
    assert project_id_derive(git_repo(tmp_path / "scratch-app")) == "scratch-app"


def test_it_uses_the_folder_name_when_the_remote_url_says_nothing(tmp_path):
    repo = git_repo(tmp_path / "scratch-app", remotes={"origin": "https://github.com/"})
    assert project_id_derive(repo) == "scratch-app"


def test_it_derives_no_project_id_for_the_filesystem_root_without_remote():
    assert project_id_derive(Path("/")) is None


# server_path_resolve


def test_it_resolves_a_folder_inside_a_repository_to_its_root_and_project(tmp_path):
    repo = git_repo(tmp_path / "app", remotes={"origin": "https://github.com/acme/app.git"})
    (repo / "src").mkdir()
    project = server_path_resolve(f"{repo}/src/")
    assert project == LocalProject(root=os.path.realpath(repo), project_id="github.com/acme/app")


def test_it_resolves_through_a_symlink_to_the_real_root(tmp_path):
    repo = git_repo(tmp_path / "real-app")
    (tmp_path / "link").symlink_to(repo, target_is_directory=True)
    project = server_path_resolve(str(tmp_path / "link"))
    assert project.root == os.path.realpath(repo)
    assert project.project_id == "real-app"


def test_it_refuses_a_relative_path():
    assert scope_error_code("app/src") == "NOT_ABSOLUTE"


def test_it_refuses_a_protected_path_before_looking_at_it():
    assert scope_error_code("/etc") == "PROTECTED_PATH"


def test_it_refuses_a_path_missing_on_the_server(tmp_path):
    with pytest.raises(ScopeError) as caught:
        server_path_resolve(str(tmp_path / "gone"))
    assert caught.value.code == "NOT_FOUND"
    assert str(tmp_path / "gone") in caught.value.message


def test_it_refuses_a_file(tmp_path):
    (tmp_path / "notes.txt").write_text("hi")
    assert scope_error_code(str(tmp_path / "notes.txt")) == "NOT_DIR"


def test_it_refuses_a_symlink_into_a_protected_directory(tmp_path):
    (tmp_path / "sneaky").symlink_to("/etc", target_is_directory=True)
    with pytest.raises(ScopeError) as caught:
        server_path_resolve(str(tmp_path / "sneaky"))
    assert caught.value.code == "PROTECTED_PATH"
    assert "/etc" in caught.value.message


def test_it_refuses_a_folder_outside_any_repository(tmp_path):
    (tmp_path / "plain").mkdir()
    assert scope_error_code(str(tmp_path / "plain")) == "NOT_GIT_REPO"


def test_it_refuses_a_repository_it_cannot_name(tmp_path, monkeypatch):
    # A repository at "/" with no remote has neither a remote url nor a folder name to go by.
    monkeypatch.setattr(paths, "git_root_find", lambda path: Path("/"))
    (tmp_path / "inside").mkdir()
    assert scope_error_code(str(tmp_path / "inside")) == "PROJECT_ID_UNAVAILABLE"
