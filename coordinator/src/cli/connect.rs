//! The target's address, its login and its TLS, from the flags, a `redis://` URI and the
//! profile file; every file named is read and checked here. No error quotes a password.

use super::args::{RESP_VALUES, RunArgs};
use super::parse::err;
use crate::config::ConfigError;
use crate::profile::FileToml;
use crest_model::convert::limits;
use crest_model::target::{self, DEFAULT_USER, Login, Resp, Secret, Session, Tls, Verify};
use std::path::PathBuf;

/// The target's address and the session every connection opens with, from `--target`
/// (a `redis://` URI may carry a user, a password and a database; a `memcache://` one
/// lists a ring's servers, returned last), `--user`,
/// `--password`/`CREST_PASSWORD`, `--password-file`, `--db` and the profile file's
/// `target`, `user`, `password_file`, `db` (a flag, or a URI given as a flag, wins over
/// the file). Within a layer each is given in one place: a password from two sources, or
/// a URI and a flag that disagree, is refused.
/// No error quotes a password.
pub(super) fn target_session(
    a: &RunArgs,
    file: &FileToml,
) -> Result<(Option<String>, Session, bool, Vec<String>), ConfigError> {
    let raw = a.target.target.as_ref().or(file.target.as_ref());
    let spec = raw
        .map(|t| target::parse_target(t).map_err(|e| err("--target", target::redacted(t), e)))
        .transpose()?;
    let (uri_user, uri_password, uri_db) = match &spec {
        Some(s) => (s.user.clone(), s.password.clone(), s.db),
        None => (None, None, None),
    };
    // A URI given as a flag is of the flag layer: its parts win over the file's.
    let from_flag = |part: bool| a.target.target.is_some() && part;
    let user = a
        .target
        .user
        .clone()
        .or_else(|| file.user.clone().filter(|_| !from_flag(uri_user.is_some())));
    if let (Some(u), Some(uu)) = (&user, &uri_user)
        && u != uu
    {
        return Err(err(
            "--user",
            u,
            format!("the --target URI names user {uu:?}; give the user in one place"),
        ));
    }
    let user = user.or(uri_user);
    let uri_pw_from_flag = from_flag(uri_password.is_some());
    let password = password(a, file, uri_password, uri_pw_from_flag)?;
    let db = a
        .target
        .db
        .or(file.db.filter(|_| !from_flag(uri_db.is_some())));
    if let (Some(d), Some(ud)) = (db, uri_db)
        && d != ud
    {
        return Err(err(
            "--db",
            d,
            format!("the --target URI names database /{ud}; give the database in one place"),
        ));
    }
    let db = db.or(uri_db).unwrap_or(0);
    if db > target::MAX_DB {
        return Err(err("--db", db, format!("must be 0 to {}", target::MAX_DB)));
    }
    let login = match (user, password) {
        (Some(u), _) if u.is_empty() || u.len() > limits::MAX_NAME => {
            return Err(err(
                "--user",
                &u,
                format!("must be 1 to {} bytes", limits::MAX_NAME),
            ));
        }
        (Some(u), None) => {
            return Err(err(
                "--user",
                u,
                "needs a password: give --password-file FILE, CREST_PASSWORD or --password (a nopass user takes any)",
            ));
        }
        (Some(user), Some(password)) => Some(Login { user, password }),
        (None, Some(password)) => Some(Login {
            user: DEFAULT_USER.into(),
            password,
        }),
        (None, None) => None,
    };
    let resp = match (a.target.resp, file.resp) {
        (Some(r), _) => r,
        (None, Some(v)) => Resp::of(v).ok_or_else(|| err("resp", v, RESP_VALUES))?,
        (None, None) => Resp::Resp2,
    };
    let tracking = a.load.tracking || file.tracking.unwrap_or(false);
    if tracking && resp != Resp::Resp3 {
        return Err(err(
            "--tracking",
            "on",
            "needs --resp 3: the invalidations it asks for are RESP3 push frames",
        ));
    }
    let session = Session {
        login,
        db,
        resp,
        tracking,
        readonly: false,
    };
    if spec.is_none() && (session.login.is_some() || session.db != 0) {
        let (flag, value) = match &session.login {
            Some(l) if a.target.user.is_some() || file.user.is_some() => ("--user", l.user.clone()),
            Some(_) => ("--password", "***".to_string()),
            None => ("--db", db.to_string()),
        };
        return Err(err(
            flag,
            value,
            "the built-in target has no users or databases; give --target host:port of a server",
        ));
    }
    let tls = spec.as_ref().is_some_and(|s| s.tls);
    let ring = spec.as_ref().map(|s| s.ring.clone()).unwrap_or_default();
    Ok((spec.map(|s| s.addr), session, tls, ring))
}

/// The password, given one way only: `--password` (or CREST_PASSWORD), `--password-file`
/// (a profile's path is relative to the profile's folder), or the `--target` URI;
/// `uri_pw_from_flag`: the URI holding a password is the flag's.
pub(super) fn password(
    a: &RunArgs,
    file: &FileToml,
    uri_password: Option<Secret>,
    uri_pw_from_flag: bool,
) -> Result<Option<Secret>, ConfigError> {
    let password_file = match (&a.target.password_file, &file.password_file) {
        (Some(p), _) => Some(p.clone()),
        // A path in the profile file is relative to the file's folder.
        (None, Some(p)) if a.target.password.is_none() && !uri_pw_from_flag => Some(
            a.load
                .profile
                .as_ref()
                .and_then(|f| f.parent())
                .map_or_else(|| p.clone(), |dir| dir.join(p)),
        ),
        (None, _) => None,
    };
    let password = match (&a.target.password, &password_file, uri_password) {
        (Some(_), Some(f), _) => {
            return Err(err(
                "--password-file",
                f.display(),
                "and --password (or CREST_PASSWORD) are both given; give the password one way",
            ));
        }
        (Some(_), None, Some(_)) => {
            return Err(err(
                "--password",
                "***",
                "the --target URI holds a password too; give the password one way",
            ));
        }
        (None, Some(f), Some(_)) => {
            return Err(err(
                "--password-file",
                f.display(),
                "the --target URI holds a password too; give the password one way",
            ));
        }
        (Some(p), None, None) => Some(Secret::new(p.clone())),
        (None, Some(f), None) => Some(read_password(f)?),
        (None, None, uri) => uri,
    };
    if let Some(p) = &password {
        if p.expose().is_empty() {
            return Err(err(
                "--password",
                "",
                "is empty; give the server's password",
            ));
        }
        if p.expose().len() > limits::MAX_NAME {
            return Err(err(
                "--password",
                "***",
                format!("is longer than {} bytes", limits::MAX_NAME),
            ));
        }
    }
    Ok(password)
}

/// TLS to the target, from `--tls` (or a `rediss://` target), `--cacert`, `--cert`,
/// `--key`, `--sni`, `--tls-skip-verify`, `--tls-skip-hostname` and the profile file's
/// `tls`, `cacert`, `cert`, `key` (paths relative to the file), `sni`. Every file is read
/// and checked here, so a bad one is refused by its flag before any worker is asked.
pub(super) fn target_tls(
    a: &RunArgs,
    file: &FileToml,
    target: Option<&str>,
    uri_tls: bool,
) -> Result<Option<Tls>, ConfigError> {
    let near_profile = |p: &PathBuf| {
        a.load
            .profile
            .as_ref()
            .and_then(|f| f.parent())
            .map_or_else(|| p.clone(), |dir| dir.join(p))
    };
    let files = crest_engine::target_tls::TlsFiles {
        ca: a
            .target
            .cacert
            .clone()
            .or_else(|| file.cacert.as_ref().map(near_profile)),
        cert: a
            .target
            .cert
            .clone()
            .or_else(|| file.cert.as_ref().map(near_profile)),
        key: a
            .target
            .key
            .clone()
            .or_else(|| file.key.as_ref().map(near_profile)),
    };
    let sni = a.target.sni.clone().or_else(|| file.sni.clone());
    let on = a.target.tls || uri_tls || file.tls == Some(true);
    if !on {
        let path = |p: &Option<PathBuf>| p.as_ref().map(|p| p.display().to_string());
        let on = |b: bool| b.then(|| "on".to_string());
        let given = [
            ("--cacert", path(&files.ca)),
            ("--cert", path(&files.cert)),
            ("--key", path(&files.key)),
            ("--sni", sni.clone()),
            ("--tls-skip-verify", on(a.target.tls_skip_verify)),
            ("--tls-skip-hostname", on(a.target.tls_skip_hostname)),
        ];
        if let Some((flag, Some(value))) = given.into_iter().find(|(_, v)| v.is_some()) {
            return Err(err(
                flag,
                value,
                "is a TLS setting, but TLS is off: add --tls, or give the target as rediss://host:port",
            ));
        }
        return Ok(None);
    }
    let Some(target) = target else {
        return Err(err(
            "--tls",
            "on",
            "the built-in target speaks plaintext only; give --target host:port of a TLS server",
        ));
    };
    let verify = if a.target.tls_skip_verify {
        Verify::None
    } else if a.target.tls_skip_hostname {
        Verify::SkipHostname
    } else {
        Verify::Full
    };
    let name = sni.unwrap_or_else(|| target::host_of(target).to_string());
    files
        .load(&name, verify)
        .map(Some)
        .map_err(|e| err(e.flag, e.path.display(), e.why))
}

/// The most `--password-file` reads: a password is one line.
const MAX_PASSWORD_FILE: u64 = 64 << 10;

/// The password in `path`: the file's one line, a final newline dropped.
pub(super) fn read_password(path: &std::path::Path) -> Result<Secret, ConfigError> {
    let bad = |why: String| err("--password-file", path.display(), why);
    let text = crest_model::file::read_text_capped(path, MAX_PASSWORD_FILE)
        .map_err(|e| bad(format!("cannot read: {e}")))?;
    let one = text
        .strip_suffix('\n')
        .map(|t| t.strip_suffix('\r').unwrap_or(t))
        .unwrap_or(&text);
    if one.contains('\n') {
        return Err(bad(
            "holds more than one line; the file must hold only the password".into(),
        ));
    }
    if one.is_empty() {
        return Err(bad("is empty; write the server's password in it".into()));
    }
    Ok(Secret::new(one))
}
